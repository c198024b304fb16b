"""Does a pair's r settle as the probe's heads see more training positions? Probings of the same frozen runs at several sizes.

    python -m studies.probe.positions LABEL=PROBING_DIR [LABEL=PROBING_DIR ...] --data PREPARED
        [--profile cpu] [--pair gpt-s1,gpt-s2 [--pair A,B ...]] [--n-boot 1000] [--out FILE] [--note TEXT]

Each PROBING_DIR holds one probe per run named in the pairs (PROBING_DIR/<run>/, as `python -m twotower_lib probe
RUN --train-positions N --out PROBING_DIR/<run>` writes them), of the same weights in every PROBING_DIR;
PREPARED is the prepared data they were scored on (its training counts pick the top-N tokens). Only a
probe's manifest.json and preference.parquet are read, and doc_stats.parquet where present (for the
pair's bootstrap interval), each checked against the sha256 in its manifest: probes made on another
machine (a GPU) can be brought back without their per-position files.

Printed per probing, in the order given, for each run: its training positions, epochs, head-training
seconds, validation loss per tower head, and the agreement (Pearson r over the top-N tokens) of its
scores with those of the last probing given (the most positions, by convention; the file holds its
agreement with every other probing too: two draws of the same size give the probe data's own noise); then each pair's r in
both score variants (Eq. 4; mean of log p) over the profile's top-N tokens, with a basic bootstrap
interval over validation documents where both runs' doc_stats came along.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from twotower_lib.analysis.uncertainty import with_bias_corrected


def read_probe(path: Path) -> dict:
    """A probe's manifest and tables, each file checked against its manifest's sha256."""
    import pandas as pd

    from twotower_lib.artifacts import sha256_file

    manifest = json.loads((path / "manifest.json").read_text())
    out = {"manifest": manifest}
    for name in ("preference.parquet", "doc_stats.parquet"):
        f = path / name
        if not f.exists():
            if name == "preference.parquet":
                raise SystemExit(f"{path}: no preference.parquet; give probe folders made by `twotower_lib probe`")
            continue
        if sha256_file(f) != manifest["files"][name]:
            raise SystemExit(f"{f}: its sha256 does not match {path / 'manifest.json'}; the files come from different probes")
        out[name] = pd.read_parquet(f)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probings", nargs="+", help="LABEL=PROBING_DIR, at least two")
    ap.add_argument("--data", type=Path, required=True, help="the prepared data the probes scored")
    ap.add_argument("--profile", default="cpu", help="whose top-N tokens the correlations are read over")
    ap.add_argument("--pair", action="append", help="two runs, comma-separated; repeatable (default gpt-s1,gpt-s2)")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.table2 import CorrelationConfig, pairwise_correlations
    from twotower_lib.analysis.uncertainty import same_run_agreement
    from twotower_lib.artifacts import atomic_write_json, portable_command, provenance
    from twotower_lib.book.profiles import get_profile
    from twotower_lib.data import load_prepared

    labelled = [p.split("=", 1) for p in args.probings]
    if len(labelled) < 2 or any(len(p) != 2 for p in labelled):
        raise SystemExit("give at least two probings as LABEL=PROBING_DIR")
    pairs = [p.split(",") for p in args.pair or ["gpt-s1,gpt-s2"]]
    if any(len(p) != 2 or p[0] == p[1] for p in pairs):
        raise SystemExit(f"--pair {args.pair}: each names two different runs, comma-separated")
    runs = list(dict.fromkeys(r for p in pairs for r in p))
    top_n = get_profile(args.profile).analysis.top_n
    data = load_prepared(args.data)
    probes = {label: {run: read_probe(Path(d) / run) for run in runs} for label, d in labelled}
    for run in runs:
        found = {p[run]["manifest"]["identity"]["weights_sha256"] for p in probes.values()}
        hashes = {p[run]["manifest"]["data_hash"] for p in probes.values()}
        if len(found) != 1 or hashes != {data.manifest["content_hash"]}:
            raise SystemExit(f"{run}: the probings read different weights or data (or not --data); compare probings "
                             "of the same runs on the same data")
    last = labelled[-1][0]
    rows = []
    for label, _ in labelled:
        row = {"probing": label, "runs": {}, "pairs": []}
        for run in runs:
            m = probes[label][run]["manifest"]
            row["runs"][run] = {"train_positions": m["heads"]["train_positions"], "epochs": m["heads"]["epochs"],
                                "head_seconds": m["seconds"]["train_heads"], "platform": m["provenance"]["platform"],
                                "val_loss": [round(v, 4) for k, v in m["val_loss"].items() if k.endswith("_head")],
                                "primary_tower": m["ordering"]["primary_tower"],
                                "agreement": {other: {c: round(float(same_run_agreement(
                                    probes[label][run]["preference.parquet"], probes[other][run]["preference.parquet"],
                                    data.counts, top_n, c)), 4) for c in SCORE_COLUMNS}
                                    for other, _ in labelled if other != label}}
            row["runs"][run]["agreement_with_last"] = row["runs"][run]["agreement"].get(last, {c: 1.0 for c in SCORE_COLUMNS})
        for a, b in pairs:
            tables = {run: probes[label][run]["preference.parquet"] for run in (a, b)}
            stats = {run: probes[label][run].get("doc_stats.parquet") for run in (a, b)}
            with_ci = all(s is not None for s in stats.values()) and args.n_boot > 0
            pair = {"a": a, "b": b}
            for c in SCORE_COLUMNS:
                cfg = CorrelationConfig(n=top_n, score_col=c, n_boot=args.n_boot if with_ci else 0, n_permutations=0,
                                        progress=False)
                r = pairwise_correlations(tables, data.counts, cfg, stats if with_ci else None).iloc[0]
                pair[f"r_{c}"] = with_bias_corrected({k: round(float(r[k]), 4) for k in ("r", "ci_low", "ci_high")
                                                      if k in r}, digits=4)
            row["pairs"].append(pair)
        rows.append(row)
    print(f"top {top_n} tokens; agreement with the probing {last!r}")
    for row in rows:
        print(f"{row['probing']}:")
        for run, v in row["runs"].items():
            print(f"  {run}: {v['train_positions']:,} positions, {v['epochs']} epochs, {v['head_seconds']:.0f} s, val loss "
                  f"{v['val_loss']}, agreement {v['agreement_with_last'][SCORE_COLUMNS[0]]:.3f} / "
                  f"{v['agreement_with_last'][SCORE_COLUMNS[1]]:.3f}")
        for p in row["pairs"]:
            r4, rl = p[f"r_{SCORE_COLUMNS[0]}"], p[f"r_{SCORE_COLUMNS[1]}"]
            ci = f" [{r4['ci_low']:.2f}, {r4['ci_high']:.2f}]" if "ci_low" in r4 else ""
            print(f"  {p['a']} vs {p['b']}: r {r4['r']:+.3f}{ci} (mean log p {rl['r']:+.3f})")
    if args.out:
        atomic_write_json(args.out, {
            "command": portable_command("studies/probe/positions.py", sys.argv[1:] if argv is None else argv),
            "note": args.note, "profile": args.profile, "top_n": top_n, "pairs": pairs, "n_boot": args.n_boot,
            "interval_unit": "validation documents", "rows": rows, "provenance": provenance()})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
