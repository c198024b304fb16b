"""Whitening of a probe's input features (`FeatureWhitening`), and folding a head trained on them back onto the raw ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from twotower_lib.probe.heads import ProbeHead


@dataclass
class FeatureWhitening:
    """Per tower, the affine map that whitens the heads' input features: x -> (x - mean) @ map, with
    map = Cov^(-1/2) (symmetric), estimated on the probe's training features.

    Why: a head's first layer is linear in the features, so a head trained on whitened features and
    then folded back (`fold`) is a head of the same family on the original ones, trained in other
    coordinates. The towers' features are correlated and unevenly scaled (`condition`: the
    covariance's largest over smallest kept eigenvalue, typically 1e4 or more), and AdamW's
    per-weight scaling does not undo correlations. Neither parametrisation reaches the optimum
    everywhere, and where the optimiser stops moves the scores (`twotower_lib.probe`); whitened features
    are the default (`ProbeConfig.precondition`).
    """
    mean: torch.Tensor       # (k, H)
    map: torch.Tensor        # (k, H, H)
    condition: list[float]   # per tower, over the directions kept
    dropped: list[int]       # per tower, directions left out as constant

    @classmethod
    def fit(cls, feats: torch.Tensor, floor: float = 1e-5, chunk: int = 65_536) -> "FeatureWhitening":
        """From features (N, k, H). A direction whose variance is below `floor` x the largest is treated
        as constant and left out (its mean goes into the bias): features cached in bf16 carry rounding noise of
        a few 1e-7 of the largest variance, and whitening such a direction would blow that noise up to unit
        variance (the towers' joint LayerNorm leaves one per tower). Features that vary below bf16's resolution
        altogether need the fp32 cache (`ProbeConfig.feature_dtype`): rounded, they hold the rounding, not the
        towers' variation."""
        n, k, H = feats.shape
        total = torch.zeros(k, H, dtype=torch.float64)
        outer = torch.zeros(k, H, H, dtype=torch.float64)
        for b in range(0, n, chunk):
            x = feats[b:b + chunk].double()                                 # (c, k, H)
            total += x.sum(0)
            outer += torch.einsum("nki,nkj->kij", x, x)
        mean = total / max(1, n)
        cov = outer / max(1, n) - mean[:, :, None] * mean[:, None, :]     # (k, H, H)
        ev, U = torch.linalg.eigh(cov)
        top = ev[:, -1:].clamp_min(1e-30)
        kept = ev >= floor * top
        scale = torch.where(kept, ev.clamp_min(1e-30).rsqrt(), torch.zeros_like(ev))
        maps = (U * scale[:, None, :]) @ U.transpose(1, 2)
        condition = [float(top[j, 0] / ev[j][kept[j]].min()) for j in range(k)]
        return cls(mean.float(), maps.float(), condition, (~kept).sum(1).tolist())

    def apply(self, feats: torch.Tensor, chunk: int = 65_536) -> torch.Tensor:
        """Whitened features (N, k, H), stored in the dtype of `feats`."""
        out = torch.empty_like(feats)
        for b in range(0, len(feats), chunk):
            x = feats[b:b + chunk].float() - self.mean                      # (c, k, H)
            out[b:b + chunk] = torch.einsum("nki,kij->nkj", x, self.map).to(feats.dtype)
        return out

    @torch.no_grad()
    def fold(self, head: ProbeHead, tower: int) -> None:
        """Turn a head trained on whitened features of `tower` into the same head on its raw features:
        A M (x - m) + c = (A M) x + (c - A M m), M symmetric: weight <- A M, bias <- c - A M m."""
        mean, m = self.mean[tower].to(head.dense.weight), self.map[tower].to(head.dense.weight)
        weight = head.dense.weight @ m                                          # (width, H)
        head.dense.bias.sub_(weight @ mean)
        head.dense.weight.copy_(weight)
