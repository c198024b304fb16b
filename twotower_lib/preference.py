"""The preference score (Eq. 3–4) and its on-disk artifact.

Per validation position we know each tower's probability of the true token. Per vocabulary token
a (over its occurrences as a target):

    p̄_ja    = mean of p_j            (the paper, Eq. 4: mean of the probabilities, then log)
    s_a      = log p̄_1a − log p̄_2a
    s_a(log) = mean(log p_1) − mean(log p_2)   (the authors' public code)

Tower 1, the *primary* tower, is the one with the higher average probability over all positions
(Eq. 3). Tokens never seen as a target get NaN, never 0.

The artifact (one directory) is the contract with every analysis: `preference.parquet` (one row
per vocabulary token), `doc_stats.parquet` (per validation document and token, the sums the
scores are made of, for bootstrap over documents) and `manifest.json` (what produced it, with
sha256 of each file so a corrupted or truncated artifact is refused).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from twotower_lib.artifacts import atomic_directory, atomic_write_json, manifest_has, read_json, sha256_file
from twotower_lib.errors import UserError

ARTIFACT_VERSION = 1
TABLE_COLUMNS = ["token_id", "token", "count", "train_count", "rank", "p1_mean", "p2_mean",
                 "logp1_mean", "logp2_mean", "score", "score_logmean"]
DOC_COLUMNS = ["doc_id", "token_id", "n", "sum_p1", "sum_p2", "sum_logp1", "sum_logp2"]


@dataclass
class TowerSums:
    """Per-position results reduced to sums, for one or more towers (physical order)."""

    token_ids: np.ndarray  # (N,) true token at each scored position
    doc_ids: np.ndarray    # (N,) validation document of each position
    p: np.ndarray          # (N, k) probability of the true token, per tower
    logp: np.ndarray       # (N, k) its log


def order_towers(mean_p: Sequence[float]) -> list[int]:
    """Eq. 3: tower indices sorted so the first has the highest average probability (ties: lower index)."""
    mean_p = np.asarray(mean_p, dtype=np.float64)
    if not np.all(np.isfinite(mean_p)):
        raise UserError(f"cannot order towers: average probabilities {mean_p.tolist()} are not finite")
    return sorted(range(len(mean_p)), key=lambda j: (-mean_p[j], j))


def frequency_order(counts: np.ndarray, token_ids: np.ndarray | None = None) -> np.ndarray:
    """Positions of `counts` from the most frequent to the least; equal counts go to the smaller
    token id (`token_ids[i]` is the id at position i; by default the position is the id). The one
    frequency ordering of the library: "the top-N tokens" always means the first N of it."""
    counts = np.asarray(counts)
    return np.lexsort((np.arange(len(counts)) if token_ids is None else np.asarray(token_ids), -counts))


def frequency_rank(train_counts: np.ndarray) -> np.ndarray:
    """Rank 1 = most frequent in the training split; ties broken by token id (`frequency_order`)."""
    counts = np.asarray(train_counts)
    if counts.ndim != 1 or counts.size == 0:
        raise UserError(f"train_counts must be a non-empty 1-D array indexed by token id, got shape {counts.shape}")
    order = frequency_order(counts)
    rank = np.empty(len(train_counts), dtype=np.int64)
    rank[order] = np.arange(1, len(train_counts) + 1)
    return rank


def preference_table(sums: TowerSums, primary: int, secondary: int, vocab_size: int,
                     train_counts: np.ndarray, tokens: Sequence[str]) -> pd.DataFrame:
    """One row per vocabulary token with both averaging variants and both scores (Eq. 4)."""
    t = sums.token_ids
    n = np.bincount(t, minlength=vocab_size).astype(np.int64)

    def per_token(values: np.ndarray) -> np.ndarray:
        s = np.bincount(t, weights=values.astype(np.float64), minlength=vocab_size)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, s / np.maximum(n, 1), np.nan)

    p1, p2 = per_token(sums.p[:, primary]), per_token(sums.p[:, secondary])
    l1, l2 = per_token(sums.logp[:, primary]), per_token(sums.logp[:, secondary])
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.log(p1) - np.log(p2)
    return pd.DataFrame({
        "token_id": np.arange(vocab_size, dtype=np.int64), "token": list(tokens),
        "count": n, "train_count": np.asarray(train_counts, dtype=np.int64),
        "rank": frequency_rank(train_counts), "p1_mean": p1, "p2_mean": p2,
        "logp1_mean": l1, "logp2_mean": l2, "score": score, "score_logmean": l1 - l2,
    })


def document_stats(sums: TowerSums, primary: int, secondary: int) -> pd.DataFrame:
    """Per (validation document, token): the count and the sums behind p̄ and mean log p."""
    df = pd.DataFrame({"doc_id": sums.doc_ids.astype(np.int64), "token_id": sums.token_ids.astype(np.int64),
                       "n": 1, "sum_p1": sums.p[:, primary].astype(np.float64),
                       "sum_p2": sums.p[:, secondary].astype(np.float64),
                       "sum_logp1": sums.logp[:, primary].astype(np.float64),
                       "sum_logp2": sums.logp[:, secondary].astype(np.float64)})
    return df.groupby(["doc_id", "token_id"], as_index=False, sort=True).sum()[DOC_COLUMNS]


# ---------------------------------------------------------------- the artifact


@dataclass
class PreferenceResult:
    path: Path
    table: pd.DataFrame
    doc_stats: pd.DataFrame
    manifest: dict

    @property
    def scores(self) -> pd.Series:
        return self.table.set_index("token_id")["score"]


def save_artifact(out_dir: str | os.PathLike, table: pd.DataFrame, doc_stats: pd.DataFrame,
                  manifest: dict, extra_files: dict[str, bytes] | None = None) -> Path:
    """Write the artifact directory atomically; the manifest records each file's sha256."""
    out_dir = Path(out_dir)
    with atomic_directory(out_dir, manifest_has("artifact_version"), "a preference artifact (a probe's output)") as tmp:
        table[TABLE_COLUMNS].to_parquet(tmp / "preference.parquet", index=False)
        doc_stats[DOC_COLUMNS].to_parquet(tmp / "doc_stats.parquet", index=False)
        for name, data in (extra_files or {}).items():
            (tmp / name).write_bytes(data)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        atomic_write_json(tmp / "manifest.json", {**manifest, "artifact_version": ARTIFACT_VERSION,
                                                   "vocab_size": int(len(table)), "files": files})
    return out_dir


def load_artifact(path: str | os.PathLike) -> PreferenceResult:
    """Load and validate a preference artifact (a probe directory, or a run directory holding `probe/`)."""
    path = Path(path)
    if not (path / "preference.parquet").exists() and (path / "probe" / "preference.parquet").exists():
        path = path / "probe"
    if not (path / "preference.parquet").exists():
        raise UserError(f"no preference artifact at {path}; produce it with `python -m twotower_lib probe RUN_DIR`")
    manifest = read_json(path / "manifest.json")
    if manifest.get("artifact_version") != ARTIFACT_VERSION:
        raise UserError(f"{path}: artifact version {manifest.get('artifact_version')} is not {ARTIFACT_VERSION}; "
                        "re-run `python -m twotower_lib probe` on the run")
    for name, digest in manifest.get("files", {}).items():
        f = path / name
        if not f.exists() or sha256_file(f) != digest:
            raise UserError(f"{f} is missing, truncated or modified (sha256 does not match its manifest); "
                            f"delete {path} and re-run `python -m twotower_lib probe` on the run")
    table = pd.read_parquet(path / "preference.parquet")
    doc_stats = pd.read_parquet(path / "doc_stats.parquet")
    if list(table.columns) != TABLE_COLUMNS or list(doc_stats.columns) != DOC_COLUMNS:
        raise UserError(f"{path}: unexpected columns {list(table.columns)} / {list(doc_stats.columns)}")
    if len(table) != manifest["vocab_size"] or not np.array_equal(table["token_id"], np.arange(len(table))):
        raise UserError(f"{path}: the table does not have one row per vocabulary token 0..{manifest['vocab_size'] - 1}")
    return PreferenceResult(path, table, doc_stats, manifest)


def check_same_vocabulary(results: Sequence[PreferenceResult]) -> None:
    """Scores are comparable only over one vocabulary (the same tokenizer)."""
    first = results[0]
    for r in results[1:]:
        if r.manifest.get("tokenizer_sha256") != first.manifest.get("tokenizer_sha256") or len(r.table) != len(first.table):
            raise UserError(f"{r.path} and {first.path} use different vocabularies (tokenizer "
                            f"{r.manifest.get('tokenizer_sha256', '?')[:12]} vs {first.manifest.get('tokenizer_sha256', '?')[:12]}, "
                            f"{len(r.table)} vs {len(first.table)} tokens): their preference scores cannot be "
                            "compared. Train both runs on the same prepared data.")


def load_positions(probe_path: str | os.PathLike, replicate: bool = False) -> TowerSums:
    """Per-position log-probabilities saved by a probe (validated by the artifact's sha256s);
    `replicate=True`: those of the second head seed (a probe run with `replicate`)."""
    path = Path(probe_path)
    manifest = read_json(path / "manifest.json")
    if sha256_file(path / "positions.npz") != manifest["files"]["positions.npz"]:
        raise UserError(f"{path / 'positions.npz'} does not match its manifest; re-run the probe")
    z = np.load(path / "positions.npz", allow_pickle=False)
    key = "logp_replicate" if replicate else "logp"
    if key not in z:
        raise UserError(f"{path} was probed without a second head seed; probe it with `replicate` on "
                        "(ProbeConfig(replicate=True), or `probe --replicate`)")
    return TowerSums(z["token_ids"], z["doc_ids"], np.exp(z[key]), z[key])


def replicate_table(probe_path: str | os.PathLike, data) -> "pd.DataFrame":
    """The preference table of a probe's second head seed, with the main heads' tower order (so it
    differs from the main table only by what the head seed changes)."""
    art = load_artifact(probe_path)
    rep = load_positions(art.path, replicate=True)
    o = art.manifest["ordering"]
    return preference_table(rep, o["primary_tower"], o["secondary_tower"], data.vocab_size, data.counts, data.tokens)
