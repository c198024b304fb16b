"""Every interval in every committed result contains the estimate it belongs to: its r where the interval holds
it, else the bias-corrected estimate written beside it (`analysis.uncertainty.bias_corrected`)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from twotower_lib.analysis.uncertainty import all_bias_corrected, basic_interval, bias_corrected

RESULTS = Path(__file__).resolve().parent.parent / "results"
ESTIMATES = ("r", "ours", "estimate", "value", "median")


def intervals(obj, where: str):
    """(where, estimate, bias-corrected or None, low, high) for every dict of `obj` with ci_low and ci_high."""
    if isinstance(obj, dict):
        if isinstance(obj.get("ci_low"), (int, float)) and isinstance(obj.get("ci_high"), (int, float)):
            est = next((obj[k] for k in ESTIMATES if isinstance(obj.get(k), (int, float))), None)
            yield where, est, obj.get("bias_corrected"), obj["ci_low"], obj["ci_high"]
        for k, v in obj.items():
            yield from intervals(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from intervals(v, f"{where}[{i}]")


def outside(est, bc, lo, hi) -> bool:
    inside = lambda x: x is not None and lo - 1e-9 <= x <= hi + 1e-9
    return not (inside(est) or inside(bc))


def test_the_bias_corrected_estimate_lies_in_its_basic_interval():
    rng = np.random.default_rng(0)
    reps = 0.6 + 0.03 * rng.standard_normal((1000, 3)) - np.array([0.0, 0.05, 0.2])   # attenuated replicates
    r = np.full(3, 0.62)
    lo, hi = basic_interval(reps, r)
    assert not (lo[2] <= r[2] <= hi[2])                      # the interval lies beside r ...
    assert np.all((lo <= bias_corrected(lo, hi)) & (bias_corrected(lo, hi) <= hi))   # ... never beside its estimate
    record = all_bias_corrected({"pairs": [{"r": 0.62, "ci_low": float(lo[2]), "ci_high": float(hi[2])}], "n": 3})
    assert record["pairs"][0]["bias_corrected"] == pytest.approx(float((lo[2] + hi[2]) / 2))
    assert all_bias_corrected({"ci_low": None, "ci_high": 0.3}) == {"ci_low": None, "ci_high": 0.3}


def test_an_interval_beside_its_estimate_is_caught():
    assert list(intervals({"a": [{"r": 0.67, "ci_low": 0.69, "ci_high": 0.79}]}, "x"))[0][0] == "x.a[0]"
    assert outside(0.67, None, 0.69, 0.79) and not outside(0.67, 0.74, 0.69, 0.79)


def test_every_committed_interval_contains_its_estimate():
    found, bad = 0, []
    for path in sorted(RESULTS.rglob("*.json")):
        for where, est, bc, lo, hi in intervals(json.loads(path.read_text()), path.relative_to(RESULTS).as_posix()):
            found += 1
            if est is None and bc is None or outside(est, bc, lo, hi):
                bad.append((where, est, bc, lo, hi))
    for path in sorted(RESULTS.rglob("*.parquet")):
        df = pd.read_parquet(path)
        for low in [c for c in df.columns if c.endswith("ci_low")]:
            high, est = low.replace("ci_low", "ci_high"), low.replace("ci_low", "").rstrip("_") or "r"
            rows = df[df[low].notna()]
            found += len(rows)
            bad += [(f"{path.name}:{i}", e, None, lo, hi) for i, (e, lo, hi) in
                    enumerate(zip(rows[est if est in df else "r"], rows[low], rows[high])) if outside(e, None, lo, hi)]
    assert found > 100 and not bad, bad[:10]
