"""The linear head's optimum, reached and certified: a full-batch, preconditioned L-BFGS refinement.

A study of the probe: `Refinement` plugs into `probe_run(refine=...)` (`python -m studies.probe refine`).

Why: the linear head of Eq. 2 (`heads.ProbeHead`, kind "linear") is a softmax regression of the token
on one tower's features, logits = E (A h + c) + b with the frozen embedding E (V, D). With mini-batch
AdamW stopped on a held-out plateau, where the optimiser stops depends on its coordinates, and that
decides the scores (`results/probe/README.md`). A probe needs a head defined by an objective, not by an optimiser's path: here,
the mean cross-entropy over the training positions plus (ridge/2) x a penalty on B, the read-out of the
whitened features, and (bias_ridge/2)|beta - beta0|² (beta the logits at the mean feature; by default
tiny and centred at 0, it keeps tokens never seen finite; `bias_prior="unigram"` centres it at the
smoothed log-frequencies). The penalty is |B|² ("readout") or tr(Bᵀ G B) ("logit", G below): the
variance over tokens of the logit change each whitened feature makes, a function of the predictions
alone (not of the embedding's coordinates) and, in the coordinates below, the plain |C|², which keeps
the problem well conditioned. The objective is strictly convex: one optimum, whatever the start.

What `refine_head` does, per head: it changes to coordinates fixed by the data alone, in which the
curvature is close to the identity, then runs L-BFGS on the exact full-batch objective (fp32 or bf16
matmuls, `precision`; fp64 sum) until the gradient's largest entry is below `gtol` or after `max_iter`
iterations; the head it writes is certified by one more pass in fp32.

- Inputs: the tower's features centred and whitened (mean and Cov^(-1/2) of the training features;
  directions of near-zero variance left out as constant, `probe.whitening.FeatureWhitening`).
- Read-out: for centred whitened inputs the Fisher of B is about (Eᵀ F E) ⊗ I, F the softmax covariance
  (Kronecker-factored, as in K-FAC). At the optimum the mean prediction equals the token frequencies f,
  so Eᵀ F E is at most G = Eᵀ(diag f - f fᵀ)E; B = G^(-1/2) C.
- Biases: the Fisher's diagonal at the optimum is f: beta = (f + 1/N)^(-1/2) ⊙ gamma.

The start is the head as it is or the unigram model; on planted problems L-BFGS converges from any
start (tests/test_probe_optimum.py).

The certificate (`certificate`), computed from the exact full-batch gradient at the end:
- `bias_residual`: per token, (predicted count - observed count) / observed count over the training
  positions. At the optimum the bias gradient is zero, so every token's predicted count equals its
  count (up to the ridge): the largest residual over tokens seen at least `min_count` times says how
  far the head is from calibrated where the scores are read.
- `gain_estimate`: ½ gᵀ P g in the preconditioned coordinates, the loss a Newton step would still gain
  if the preconditioner were the Hessian (an estimate, in nats).
- `grad_norm`: the preconditioned gradient's norm, the quantity L-BFGS stops on.

`calibrate_biases` moves only the biases to their optimum given the read-out (proportional fitting).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

from twotower_lib.errors import UserError
from twotower_lib.probe.heads import LinearCrossEntropy, ProbeHead


PENALTIES = ("logit", "readout")  # what the ridge penalises: see RefineConfig.penalty


@dataclass(frozen=True)
class RefineConfig:
    max_iter: int = 60           # L-BFGS iterations (each one or a few full passes over the features)
    gtol: float = 1e-4           # stop when the preconditioned gradient's largest entry falls below this
    ridge: float = 1e-3          # (ridge/2) x the penalty, added to the mean cross-entropy
    penalty: str = "readout"     # "readout": |B|², B the read-out of the whitened features; "logit": |G^(1/2) B|² =
                                 # tr(Bᵀ G B), the variance over tokens (drawn by frequency) of the logit change that a
                                 # unit step along each whitened feature direction makes
    bias_ridge: float = 1e-6     # (bias_ridge/2)|beta - beta0|², beta the logits at the mean feature (fixes unseen tokens)
    bias_prior: str = "zero"     # beta0: "zero", or "unigram" (log of the add-one smoothed training frequencies): a
                                 # bias_ridge of r acts as about r x N pseudo-counts pulling rare tokens to their frequency
    history: int = 20            # L-BFGS memory
    min_count: int = 20          # tokens seen fewer times are left out of the bias residual's maximum
    precision: str = "fp32"      # the passes' matmuls: "fp32", or "bf16" (fp32 softmax and sums; faster on CPUs with
                                 # native bf16); the certificate of the head written is always computed in fp32

    def validate(self) -> "RefineConfig":
        for name in ("max_iter", "history", "min_count"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise UserError(f"invalid refine config: `{name}` = {getattr(self, name)!r} must be a positive integer")
        if self.bias_prior not in ("zero", "unigram"):
            raise UserError(f"invalid refine config: bias_prior = {self.bias_prior!r} must be 'zero' or 'unigram'")
        if self.penalty not in PENALTIES:
            raise UserError(f"invalid refine config: penalty = {self.penalty!r} must be one of {PENALTIES}")
        if self.precision not in ("fp32", "bf16"):
            raise UserError(f"invalid refine config: precision = {self.precision!r} must be 'fp32' or 'bf16'")
        if not (self.gtol > 0 and self.ridge >= 0 and self.bias_ridge >= 0):
            raise UserError(f"invalid refine config: gtol = {self.gtol!r} must be positive and ridge = {self.ridge!r} "
                            "non-negative")
        return self


def _inverse_sqrt(sym: torch.Tensor, floor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(S^(-1/2), S^(1/2)) of a symmetric PSD matrix, eigenvalues below floor x the largest raised to it."""
    ev, U = torch.linalg.eigh(sym.double())
    ev = ev.clamp_min(floor * ev[-1].clamp_min(1e-30))
    return ((U * ev.rsqrt()) @ U.T).float(), ((U * ev.sqrt()) @ U.T).float()


@dataclass
class _Coordinates:
    """The preconditioned coordinates of one head: x̃ = (x - mu) M (M: Cov^(-1/2) on the kept directions,
    P its pseudo-inverse), A = Gi C M and b = d ⊙ gamma - E A mu (the dense bias c folded into b)."""
    mu: torch.Tensor     # (H,)
    M: torch.Tensor      # (H, H) input whitening
    P: torch.Tensor      # (H, H) its pseudo-inverse, Cov^(1/2) on the kept directions
    Gi: torch.Tensor     # (D, D) G^(-1/2), the output side
    Gs: torch.Tensor     # (D, D) G^(1/2)
    d: torch.Tensor      # (V,) bias scaling (f + 1/N)^(-1/2), f the token frequencies
    log_f: torch.Tensor  # (V,) log of the add-one smoothed frequencies (the "unigram" bias prior's centre)

    def to_head(self, E: torch.Tensor, C: torch.Tensor, gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(A, b) of the head on the raw features, differentiable in (C, gamma)."""
        A = self.Gi @ C @ self.M                                        # (D, H)
        return A, self.d * gamma - E @ (A @ self.mu)

    def from_head(self, E: torch.Tensor, A: torch.Tensor, c: torch.Tensor, b: torch.Tensor):
        """(C, gamma) of a head (A, c, b) on the raw features: the same logits for every x in the kept directions."""
        C = self.Gs @ A @ self.P                                        # B = A P; C = G^(1/2) B
        beta = E @ (A @ self.mu + c) + b                                # logits = x̃ Bᵀ Eᵀ + beta
        return C, beta / self.d


def _coordinates(E: torch.Tensor, x: torch.Tensor, y: torch.Tensor, floor: float = 1e-5) -> _Coordinates:
    """The preconditioned coordinates, from the training features and the labels' frequencies f alone (not
    from the head: every start is then optimised in the same coordinates). At the optimum the mean predicted
    distribution equals f (the bias gradient is zero), so the output Fisher Eᵀ(diag(p̄) - E[p pᵀ])E is at most
    G = Eᵀ(diag(f) - f fᵀ)E, the covariance of the embedding under the token frequencies, and the bias
    Fisher's diagonal is f."""
    from twotower_lib.probe.whitening import FeatureWhitening

    V = E.shape[0]
    white = FeatureWhitening.fit(x[:, None], floor=floor)
    mu, M = white.mean[0], white.map[0]
    ev, U = torch.linalg.eigh(M.double())
    # M's kept eigenvalues lie within 1/sqrt(floor) of its largest, those of the dropped directions are ~0
    kept = ev > 1e-3 * ev.max()
    P = ((U * torch.where(kept, 1 / ev.clamp_min(1e-30), torch.zeros_like(ev))) @ U.T).float()
    f = torch.bincount(y, minlength=V).double() / len(y)
    Ed = E.double()
    m = Ed.T @ f
    G = Ed.T @ (f[:, None] * Ed) - torch.outer(m, m)                      # (D, D)
    Gi, Gs = _inverse_sqrt(G, 1e-6)
    d = (f + 1.0 / len(y)).rsqrt().float()
    log_f = ((f * len(y) + 1) / (len(y) + V)).log().float()
    return _Coordinates(mu, M, P, Gi, Gs, d, log_f)


def _objective(xt: torch.Tensor, y: torch.Tensor, E: torch.Tensor, co: _Coordinates, C: torch.Tensor,
               gamma: torch.Tensor, cfg: RefineConfig, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Mean cross-entropy + (ridge/2) x penalty + (bias_ridge/2)|beta - beta0|² at (C, gamma), B = Gi C the read-out of
    the whitened features (penalty |B|², or |C|² = tr(Bᵀ G B) for "logit") and beta = d ⊙ gamma the logits at
    the mean feature; in fp64 (its sum over every position is fp64, the matmuls `dtype`): near the optimum
    L-BFGS compares losses closer than fp32 resolves."""
    B, beta = co.Gi @ C, co.d * gamma
    loss = LinearCrossEntropy.apply(xt, E @ B, beta, y, dtype, torch.float64)   # logits = x̃ Bᵀ Eᵀ + beta
    penalised = C if cfg.penalty == "logit" else B
    offset = beta - co.log_f if cfg.bias_prior == "unigram" else beta
    return loss + 0.5 * (cfg.ridge * penalised.double().square().sum() + cfg.bias_ridge * offset.double().square().sum())


def _start(head: ProbeHead, x: torch.Tensor, y: torch.Tensor):
    """E, the coordinates, the whitened features (N, H) fp32 and the head's (C, gamma) in those coordinates."""
    _check(head)
    E = head.embedding.float()
    co = _coordinates(E, x, y)
    xt = ((x.float() - co.mu) @ co.M).contiguous()
    C, gamma = co.from_head(E, head.dense.weight.detach().float(), head.dense.bias.detach().float(),
                            head.bias.detach().float())
    return E, co, xt, C, gamma


def _certify(xt, y, E, co: _Coordinates, C: torch.Tensor, gamma: torch.Tensor, cfg: RefineConfig) -> dict:
    """The certificate at (C, gamma), from one exact full-batch pass."""
    C, gamma = C.detach().requires_grad_(True), gamma.detach().requires_grad_(True)
    loss = _objective(xt, y, E, co, C, gamma, cfg)
    gC, gg = torch.autograd.grad(loss, (C, gamma))
    return _summary(loss, gC, gg, gamma, co, y, E.shape[0], cfg)


def certificate(head: ProbeHead, x: torch.Tensor, y: torch.Tensor, cfg: RefineConfig | None = None) -> dict:
    """How far `head` (linear) is from the optimum on the training positions (x, y): see the module's docstring."""
    cfg = (cfg or RefineConfig()).validate()
    E, co, xt, C, gamma = _start(head, x, y)
    return _certify(xt, y, E, co, C, gamma, cfg)


def _summary(loss, gC, gg, gamma, co: _Coordinates, y: torch.Tensor, V: int, cfg: RefineConfig) -> dict:
    counts = torch.bincount(y, minlength=V).double()
    # d loss / d beta = (predicted - observed counts) / N + bias_ridge * (beta - beta0); gamma's gradient is d ⊙ that
    beta = co.d.double() * gamma.detach().double()
    if cfg.bias_prior == "unigram":
        beta = beta - co.log_f.double()
    excess = (gg.double() / co.d.double() - cfg.bias_ridge * beta) * len(y)
    seen = counts >= cfg.min_count
    residual = (excess[seen] / counts[seen]).abs()
    flat = torch.cat([gC.flatten(), gg]).double()
    return {"loss": round(loss.item(), 6), "grad_norm": float(flat.norm()), "grad_max": float(flat.abs().max()),
            "gain_estimate": float(0.5 * flat.square().sum()),
            "bias_residual_max": round(float(residual.max()) if len(residual) else 0.0, 5),
            "bias_residual_median": round(float(residual.median()) if len(residual) else 0.0, 5),
            "tokens_checked": int(seen.sum())}


def _check(head: ProbeHead) -> None:
    if head.kind != "linear":
        raise UserError(f"the full-batch refinement is for the linear head (a convex problem); this head is {head.kind!r}")


def refine_head(head: ProbeHead, x: torch.Tensor, y: torch.Tensor, cfg: RefineConfig | None = None,
                from_unigram: bool = False, show: bool = True, desc: str = "refining head") -> dict:
    """Move a linear `head` to the optimum of its objective on the training features x (N, H) and labels
    y (N,), in place (matmuls in `cfg.precision`, sums in fp64); return the record: the loss per iteration, the certificate
    before and after, passes over the features, seconds."""
    cfg = (cfg or RefineConfig()).validate()
    _check(head)
    if len(y) == 0:
        raise UserError("no training positions to refine the head on")
    t0 = time.perf_counter()
    E, co, xt, C0, g0 = _start(head, x, y)                              # xt: (N, H) whitened, fp32
    if from_unigram:       # start from the unigram model: no read-out, biases at the log-frequencies
        f = torch.bincount(y, minlength=E.shape[0]).float() / len(y)
        C0, g0 = torch.zeros_like(C0), (f + 1.0 / len(y)).log() / co.d
    C, gamma = C0.clone().requires_grad_(True), g0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([C, gamma], lr=1.0, max_iter=cfg.max_iter, max_eval=2 * cfg.max_iter,
                            history_size=cfg.history, line_search_fn="strong_wolfe",
                            tolerance_grad=cfg.gtol, tolerance_change=1e-12)
    bar = tqdm(total=cfg.max_iter, desc=desc, unit="pass", disable=not show, leave=False)
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
    curve: list[float] = []

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = _objective(xt, y, E, co, C, gamma, cfg, dtype)
        loss.backward()
        curve.append(round(loss.item(), 7))
        if "before" not in record:
            record["before"] = _summary(loss, C.grad, gamma.grad, gamma, co, y, E.shape[0], cfg)
        bar.set_postfix(loss=f"{curve[-1]:.5f}", gmax=f"{max(float(C.grad.abs().max()), float(gamma.grad.abs().max())):.1e}")
        bar.update(1)
        if not math.isfinite(curve[-1]):
            raise UserError(f"{desc}: the objective became {curve[-1]} (features with inf or nan?)")
        return loss                     # fp64: torch's L-BFGS reads it as a Python float

    record: dict = {}
    opt.step(closure)
    bar.close()
    state = opt.state[C]
    after = _certify(xt, y, E, co, C, gamma, cfg)   # the head that is written, certified by its own full pass
    stopped = "gtol" if after["grad_max"] <= cfg.gtol else ("max_iter" if state.get("n_iter", 0) >= cfg.max_iter
                                                           else "no_progress")
    with torch.no_grad():
        A, b = co.to_head(E, C.detach(), gamma.detach())
        head.dense.weight.copy_(A.to(head.dense.weight.dtype))
        head.dense.bias.zero_()
        head.bias.copy_(b.to(head.bias.dtype))
    return {"iterations": int(state.get("n_iter", 0)), "passes": len(curve) + 1, "stopped": stopped, "loss_curve": curve,
            "before": record["before"], "after": after, "seconds": round(time.perf_counter() - t0, 2)}


@torch.no_grad()
def predicted_counts(head: ProbeHead, x: torch.Tensor) -> torch.Tensor:
    """Σ_n p(v | x_n) for every token v (V,), fp64 sums of fp32 softmaxes: one forward pass over x (N, H)."""
    W, b = head.folded() if head.folds else (head.embedding @ head.dense.weight, head.embedding @ head.dense.bias + head.bias)
    W, b = W.float(), b.float()
    total = torch.zeros(len(b), dtype=torch.float64)
    step = max(16, (1 << 20) // len(b))
    for r in range(0, len(x), step):
        total += torch.softmax(x[r:r + step].float() @ W.T + b, dim=1).sum(0, dtype=torch.float64)
    return total


@torch.no_grad()
def calibrate_biases(head: ProbeHead, x: torch.Tensor, y: torch.Tensor, passes: int = 8, tol: float = 1e-3,
                     pseudo: float = 0.5, min_count: int = 20) -> dict:
    """Move a linear head's token biases to their optimum given its read-out, in place: iterative proportional
    fitting, b_v += log((count_v + pseudo) / (predicted_v + pseudo)), one forward pass each, until every
    token seen at least `min_count` times has a predicted count within `tol` (relative) of its count, or
    after `passes`; returns the largest gap before each pass and after the last.

    Why: the bias gradient of the cross-entropy is (predicted - observed count) / N, so the biases are at
    their optimum exactly when each token's predicted count equals its count. A mini-batch optimiser
    sees that gradient under the batches' sampling noise, which for all but the most frequent tokens is
    far larger than the gradient itself, so AdamW's heads stop with their counts off
    (`results/probe/optimum/calibrated.json` measures by how much). Proportional fitting is a Newton
    step per token (its curvature is its predicted count) and converges in a few passes. The read-out is
    not changed, so this is the calibration part of the optimum only (`certificate` measures the rest;
    what it changes in the scores is in the same results file)."""
    _check(head)
    counts = torch.bincount(y, minlength=head.bias.shape[0]).double()
    seen = counts >= min_count
    gaps = []
    for _ in range(passes):
        pred = predicted_counts(head, x)
        gap = float(((pred - counts)[seen] / counts[seen]).abs().max()) if seen.any() else 0.0
        gaps.append(round(gap, 5))
        if gap < tol:
            break
        head.bias += ((counts + pseudo) / (pred + pseudo)).log().to(head.bias.dtype)
    else:
        pred = predicted_counts(head, x)
        gaps.append(round(float(((pred - counts)[seen] / counts[seen]).abs().max()) if seen.any() else 0.0, 5))
    return {"passes": len(gaps), "largest_gap": gaps}


@dataclass(frozen=True)
class Refinement:
    """The probe's step after AdamW (`probe_training.HeadRefiner`): `iters` L-BFGS iterations take every
    trained linear head to the optimum of the mean cross-entropy + (ridge/2) x penalty on the training
    features, in place, with its matmuls in the heads' training dtype; per head, what the refinement did and
    its certificate before and after."""

    iters: int = 15
    ridge: float = 0.03
    penalty: str = "logit"

    @property
    def identity(self) -> dict:
        return {"iters": self.iters, "ridge": self.ridge, "penalty": self.penalty}

    def __call__(self, heads, features, k: int, dtype: torch.dtype, show: bool) -> list[dict]:
        rcfg = RefineConfig(max_iter=self.iters, ridge=self.ridge, penalty=self.penalty,
                            precision="bf16" if dtype == torch.bfloat16 else "fp32").validate()
        records = []
        for i, head in enumerate(heads):
            device = head.bias.device
            r = refine_head(head, features.train[:, i % k].to(device), features.labels.to(device), rcfg, show=show,
                            desc=f"refining head {i + 1}/{len(heads)}")
            records.append({key: r[key] for key in ("iterations", "passes", "stopped", "seconds", "loss_curve",
                                                    "before", "after")})
        return records
