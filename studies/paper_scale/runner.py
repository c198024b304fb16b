"""The paper's five cases at Table 1 sizes, trained on one GPU (`benchmarks/gpu_paper_cases.sh`):
`pack` keeps per case the training run's config, manifest and log, and the probe's manifest,
preference table, per-document statistics and the second head seed's table (everything Table 2, its
bootstrap intervals, the text ceiling and the probe-seed reliability need, and no weights); `table`
writes Table 2 over the packed cases to `results/gpu/paper_cases.json`; `book` writes the paper-scale
page's parts from the committed results (`studies.paper_scale.report`).

    python -m studies.paper_scale pack RUNS OUT      # on the GPU: small files, no weights
    python -m studies.paper_scale table OUT [...]    # here: results/gpu/paper_cases.json
    python -m studies.paper_scale book               # here: results/gpu/book.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from twotower_lib.analysis.uncertainty import with_bias_corrected
from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from twotower_lib.errors import UserError

TRAINING_FILES = ("config.json", "manifest.json", "log.jsonl")
PROBE_FILES = ("manifest.json", "preference.parquet", "doc_stats.parquet")


def pack(runs: Path, out: Path) -> list[str]:
    """Copy each finished, probed run under `runs` into `out/<case>/` (training/ and probe/), and write
    the second head seed's preference table beside the probe's."""
    from twotower_lib.data import load_prepared
    from twotower_lib.preference import replicate_table

    cases = sorted(p.parents[1].name for p in runs.glob("*/probe/manifest.json") if (p.parents[1] / "model.safetensors").exists())
    if not cases:
        raise UserError(f"no finished, probed run under {runs} (RUN/model.safetensors and RUN/probe/manifest.json)")
    for case in cases:
        src, dst = runs / case, out / case
        (dst / "training").mkdir(parents=True, exist_ok=True)
        (dst / "probe").mkdir(parents=True, exist_ok=True)
        for name in TRAINING_FILES:
            shutil.copy2(src / name, dst / "training" / name)
        for name in PROBE_FILES:
            shutil.copy2(src / "probe" / name, dst / "probe" / name)
        data = load_prepared(read_json(src / "config.json")["data"]["path"])
        replicate_table(src / "probe", data).to_parquet(dst / "probe" / "replicate.parquet")
    return cases


def _case_summary(case: Path, tokens_per_epoch: int) -> dict:
    """One case's training and probe record: what the GPU time bought, and the probe's own ceilings."""
    train_manifest = read_json(case / "training" / "manifest.json")
    log = [json.loads(line) for line in (case / "training" / "log.jsonl").read_text().splitlines() if line.strip()]
    probe = read_json(case / "probe" / "manifest.json")
    model = train_manifest["config"]["model"]
    return {"preset": train_manifest["config"]["train"]["preset"], "model_type": model["model_type"],
            "layers": model["n_layer"], "hidden": model["hidden"], "intermediate": model["intermediate"],
            "tokens_seen": train_manifest["tokens_seen"], "steps": train_manifest["steps"],
            "epochs": train_manifest["tokens_seen"] / tokens_per_epoch, "wall_time_s": train_manifest["wall_time_s"],
            "precision": train_manifest["precision"], "peak_lr": train_manifest["config"]["train"]["lr"],
            "tokens_per_s": [r["tokens_per_s"] for r in log][-1], "val_loss": [r["val_loss"] for r in log if "val_loss" in r][-1],
            "probe_val_loss": probe["val_loss"], "probe_epochs": len(probe["heads"]["curve"]),
            "primary_tower": probe["ordering"]["primary_tower"], "order_rules_agree": probe["ordering"]["rules_agree"],
            "replicate_same_primary": probe["replicate"]["ordering"][0] == probe["ordering"]["primary_tower"],
            "gpu_code_version": train_manifest["code_version"]}


def table(packed: Path, n: int = 1000, n_boot: int = 1000, cpu_profile: Path | None = None) -> dict:
    """Table 2 over the packed cases in both score variants: r with a document-bootstrap interval, each
    pair's text ceiling, each case's probe-seed reliability, and the CPU profile's r and the paper's
    value for the same pair."""
    import pandas as pd

    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations
    from twotower_lib.analysis.uncertainty import same_run_agreement, text_ceiling

    cases = sorted(p.name for p in packed.iterdir() if (p / "probe" / "preference.parquet").is_file())
    if len(cases) < 2:
        raise UserError(f"{packed} holds {len(cases)} packed case(s); Table 2 needs at least two")
    tables = {c: pd.read_parquet(packed / c / "probe" / "preference.parquet").set_index("token_id", drop=False)
              for c in cases}
    doc_stats = {c: pd.read_parquet(packed / c / "probe" / "doc_stats.parquet") for c in cases}
    replicates = {c: pd.read_parquet(packed / c / "probe" / "replicate.parquet").set_index("token_id", drop=False)
                  for c in cases}
    counts = tables[cases[0]]["train_count"].to_numpy()
    tokens_per_epoch = int(counts.sum())  # the training text's tokens: one epoch
    cpu = {}
    if cpu_profile and cpu_profile.is_file():
        cpu = {p["pair"]: p for p in read_json(cpu_profile)["scorecard"]["points"] if p["item"].startswith("Table 2")}
    out = {"n_tokens": n, "bootstrap": n_boot, "interval_unit": "validation documents",
           "cases": {c: {**_case_summary(packed / c, tokens_per_epoch),
                         **{f"reliability_{col}": same_run_agreement(tables[c], replicates[c], counts, n, col)
                            for col in SCORE_COLUMNS}} for c in cases},
           "pairs": []}
    for col in SCORE_COLUMNS:
        cfg = CorrelationConfig(n=n, score_col=col, n_boot=n_boot, n_permutations=0, progress=False)
        r = pairwise_correlations(tables, counts, cfg, doc_stats)
        ceiling = text_ceiling(tables, doc_stats, counts, list(zip(r.a, r.b)), n, score_col=col)
        for row, ceil in zip(r.to_dict("records"), ceiling.to_dict("records")):
            pair = f"{row['a']} vs {row['b']}"
            ref = cpu.get(pair) or cpu.get(f"{row['b']} vs {row['a']}") or {}
            out["pairs"].append(with_bias_corrected(
                {"pair": pair, "score": col, "r": row["r"], "ci_low": row["ci_low"], "ci_high": row["ci_high"],
                 "text_ceiling": ceil["ceiling"], "paper": ref.get("paper"),
                 "cpu_profile": ref.get("ours") if col == "score" else None}))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.paper_scale", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("pack", help="on the GPU machine: copy the small artifacts of every probed run")
    a.add_argument("runs", type=Path)
    a.add_argument("out", type=Path)
    t = sub.add_parser("table", help="here: Table 2 of the packed cases, written as JSON with its provenance")
    t.add_argument("packed", type=Path, help="the directory `pack` wrote (its case folders)")
    t.add_argument("--out", type=Path, default=Path("results/gpu/paper_cases.json"))
    t.add_argument("--n", type=int, default=1000, help="the most frequent tokens compared (the CPU profile's top_n)")
    t.add_argument("--bootstrap", type=int, default=1000)
    t.add_argument("--cpu-profile", type=Path, default=Path("results/profiles/cpu.json"))
    sub.add_parser("book", help="here: the paper-scale page's parts and numbers, from the committed results")
    args = p.parse_args(argv)
    try:
        if args.command == "pack":
            print("packed:", ", ".join(pack(args.runs, args.out)))
        elif args.command == "book":
            from studies.paper_scale.report import write_book

            print(f"book parts -> {write_book()}")
        else:
            result = table(args.packed, args.n, args.bootstrap, args.cpu_profile)
            command = f"python -m studies.paper_scale table PACKED --n {args.n} --bootstrap {args.bootstrap}"
            atomic_write_json(args.out, provenance(command=command, **result))  # PACKED: no machine's path
            for row in result["pairs"]:
                print(f"{row['pair']:28} {row['score']:14} r {row['r']:+.2f} [{row['ci_low']:+.2f}, {row['ci_high']:+.2f}] "
                      f"ceiling {row['text_ceiling']:.2f} paper {row['paper']} cpu {row['cpu_profile']}")
            from studies.paper_scale.report import write_book

            print(f"book parts -> {write_book()}")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
