"""The seed study's probes as small committed files: the report reads them, and the study resumes from them.

A probe directory under `runs/` holds a vocabulary-sized table and per-document sums (megabytes), and it is lost
with the machine; the study takes days of CPU. So each finished probe is exported at once to
`results/seeds/<profile>/probes/<kind>/<name>.json` (kind: `cases`, `untrained`, `independent` for a single-tower
probe, `pairs` for two single-tower probes scored as one pseudo-model): Eq. 4's scores of its `EXPORT_TOKENS`
most frequent scored tokens (the report compares two runs on the `top_n` most frequent tokens both scored: every
run of a profile scores the same validation tokens, so the top 1,000 both scored lie in each run's top 1,200),
what the report reads of its manifest, the split-half text reliability of its top-`top_n` scores (the
per-document sums it needs are not exported; a single-tower probe has neither scores nor reliability), the minutes
its run trained, and provenance. A study on a new checkout skips every probe whose export was made with today's
probe settings and version (`is_current`), and every run whose exports are all current.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from twotower_lib.artifacts import atomic_write_text, provenance, read_json

EXPORTS = "probes"
EXPORT_TOKENS = 1200
KINDS = ("cases", "untrained", "independent", "pairs")
MANIFEST_KEYS = ("ordering", "val_loss", "resolved_precision", "seconds", "probe_config", "identity", "data_hash",
                 "vocab_size", "towers", "seed")     # what the report and `is_current` read of a probe's manifest


@dataclass(frozen=True)
class Exported:
    """One exported probe, read as the report reads a probe artifact: `table` has one row per vocabulary token
    (NaN outside the exported ones), `path.name` is the probe's name."""

    path: Path
    table: pd.DataFrame
    manifest: dict
    text_reliability: dict
    train_minutes: float | None


def export_path(results: Path, kind: str, name: str) -> Path:
    """results: the study's folder of one profile (`results/seeds/<profile>`)."""
    return results / EXPORTS / kind / f"{name}.json"


def export_probe(probe: Path, out: Path, counts: np.ndarray, top_n: int, run: Path | None = None) -> None:
    """Write the export of the probe directory `probe` to `out`; `run`: the training folder whose minutes it keeps."""
    import json

    from twotower_lib.analysis.correlation import scored_tokens, scored_top_tokens
    from twotower_lib.analysis.uncertainty import split_half_or_nan
    from twotower_lib.preference import load_artifact

    art = load_artifact(probe)
    m = art.manifest
    if m.get("towers") == 1:   # one tower prefers nothing: its pseudo-model's pairing (`pairs`) holds the scores
        ids, reliability = np.array([], dtype=int), {"pearson": np.nan, "spearman": np.nan}
    else:
        scored = len(scored_tokens({"run": art.table}, counts, "score"))     # a small vocabulary: every scored token
        ids = scored_top_tokens({"run": art.table}, counts, min(EXPORT_TOKENS, scored), "score")
        reliability = {method: split_half_or_nan(art.doc_stats, ids[:top_n], method=method)
                       for method in ("pearson", "spearman")}
    trained = run is not None and (run / "manifest.json").exists()
    record = {"name": probe.name, "token_ids": ids.tolist(),
              "score": [float(f"{v:.6g}") for v in art.table["score"].to_numpy()[ids]],
              "score_logmean": [float(f"{v:.6g}") for v in art.table["score_logmean"].to_numpy()[ids]],
              "manifest": {k: m[k] for k in MANIFEST_KEYS if k in m}
                          | {"heads": {"epochs": m.get("heads", {}).get("epochs")},
                             "torch_threads": m.get("provenance", {}).get("torch_threads")},
              "text_reliability": {k: None if np.isnan(v) else round(float(v), 6) for k, v in reliability.items()},
              "train_minutes": round(read_json(run / "manifest.json")["wall_time_s"] / 60, 2) if trained else None,
              "provenance": provenance()}
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")


def load_export(path: Path) -> Exported:
    e = read_json(path)
    m = e["manifest"]
    table = pd.DataFrame({c: np.full(m["vocab_size"], np.nan) for c in ("score", "score_logmean")})
    for c in ("score", "score_logmean"):
        table.loc[e["token_ids"], c] = e[c]
    m = m | {"provenance": {"torch_threads": m.get("torch_threads")}}
    return Exported(Path(e["name"]), table, m, e["text_reliability"], e["train_minutes"])


def is_current(path: Path, cfg) -> bool:
    """An export at `path` made by a probe with `cfg`'s settings and today's probe version (a pseudo-model's pairing
    records no probe of its own: it is kept once exported; delete it to pair its halves again)."""
    if not path.exists():
        return False
    identity = read_json(path)["manifest"].get("identity")
    return identity is None or made_by(identity, cfg)


def made_by(identity: dict, cfg) -> bool:
    """Whether a probe's recorded identity is that of a probe with `cfg`'s settings at today's probe version."""
    from twotower_lib.probe.config import PROBE_VERSION, settled

    return identity.get("version") == PROBE_VERSION and settled(identity.get("probe", {})) == asdict(cfg)
