"""The probe's dtype against its scores: the same trained runs probed in fp32, in bf16 (the towers' pass and
the heads' matmuls; `precision="bf16"`), and in bf16 with fp32 scoring logits (`score_precision="fp32"`).

    python -m studies.probe.precision --runs-dir DIR [--profile cpu] [--runs bert-large-s1,bert-large-s2]
        [--out results/probe/precision.json]

Why: `precision="auto"` once resolved by the machine (bf16 where a CPU has native bf16, fp32 elsewhere), so the
same seed gave another probe on another CPU. This measures how far apart the dtypes' scores are. Each named run
of `<runs-dir>/<profile>/training/` is probed with the profile's probe in each dtype, side by side at the
profile's threads per run (outputs in `<runs-dir>/<profile>/probing/precision/<dtype>/<run>`; an up-to-date
probe is reused). The result holds, per dtype, the runs' pair r over the profile's top_n tokens with its
bootstrap interval, and, per run, the agreement of each two dtypes' scores and each probe's record.
"""

from __future__ import annotations

import argparse
import sys
from itertools import combinations
from pathlib import Path

RESULT = Path(__file__).resolve().parents[2] / "results" / "probe" / "precision.json"
DTYPES = {"fp32": {"precision": "fp32"}, "bf16": {"precision": "bf16"},
          "bf16-fp32-scoring": {"precision": "bf16", "score_precision": "fp32"}}


def main(argv: list[str] | None = None) -> int:
    from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations
    from twotower_lib.analysis.uncertainty import same_run_agreement
    from twotower_lib.artifacts import atomic_write_json, portable_command, provenance
    from twotower_lib.book.profiles import get_profile, profile_dir
    from twotower_lib.data import load_prepared
    from twotower_lib.errors import UserError
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import probe_run
    from twotower_lib.workers import run_jobs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", required=True, help="the runs folder of a pipeline run (its training and data)")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--runs", default="bert-large-s1,bert-large-s2", help="two trained runs, comma-separated")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    profile = get_profile(args.profile)
    root = profile_dir(profile.name, args.runs_dir)
    runs = args.runs.split(",")
    missing = [r for r in runs if not (root / "training" / r / "model.safetensors").exists()]
    if len(runs) != 2 or missing:
        raise UserError(f"--runs needs two finished runs of {root / 'training'}; missing: {missing or runs}")
    jobs = [{"run_dir": str(root / "training" / run), "cfg": profile.probe_config(**changes),
             "data_dir": str(root / "data" / "prepared"), "out": str(root / "probing" / "precision" / name / run),
             "show": False} for name, changes in DTYPES.items() for run in runs]
    run_jobs(probe_run, jobs, profile.train.threads_per_run, "probes in each dtype", label=lambda j: j["out"])

    data = load_prepared(root / "data" / "prepared")
    arts = {(name, run): load_artifact(root / "probing" / "precision" / name / run) for name in DTYPES for run in runs}
    cfg = CorrelationConfig(n=profile.analysis.top_n, n_boot=profile.analysis.bootstrap, n_permutations=0,
                            progress=False)
    pairs = {}
    for name in DTYPES:
        a = {run: arts[(name, run)] for run in runs}
        t = pairwise_correlations({k: v.table for k, v in a.items()}, data.counts, cfg,
                                  doc_stats={k: v.doc_stats for k, v in a.items()}).iloc[0]
        pairs[name] = {"r": round(float(t["r"]), 4), "ci": [round(float(t["ci_low"]), 4), round(float(t["ci_high"]), 4)]}
    per_run = {run: {
        "agreement": {f"{a} vs {b}": round(same_run_agreement(arts[(a, run)].table, arts[(b, run)].table, data.counts,
                                                              profile.analysis.top_n, "score"), 4)
                      for a, b in combinations(DTYPES, 2)},
        "probes": {name: {"resolved_precision": arts[(name, run)].manifest["resolved_precision"],
                          "epochs": arts[(name, run)].manifest["heads"]["epochs"],
                          "val_loss": {k: round(v, 5) for k, v in arts[(name, run)].manifest["val_loss"].items()},
                          "primary_tower": arts[(name, run)].manifest["ordering"]["primary_tower"]}
                   for name in DTYPES}} for run in runs}
    atomic_write_json(args.out, {
        "command": portable_command("-m studies.probe.precision", sys.argv[1:] if argv is None else argv),
        "profile": profile.name, "top_n": profile.analysis.top_n, "runs": runs, "dtypes": DTYPES,
        "pair": pairs, "per_run": per_run, "provenance": provenance()})
    for name, p in pairs.items():
        print(f"{name:20s} pair r = {p['r']:+.3f} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}]")
    for run, rec in per_run.items():
        print(run, "; ".join(f"{k}: {v:.4f}" for k, v in rec["agreement"].items()))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
