"""How far a change of the probe moved each case's scores: two probings of the same frozen runs.

    python -m studies.probe.compare_versions OLD_PROBING_DIR NEW_PROBING_DIR [--profile cpu] [--out FILE]

Each directory is a profile's `probing/` folder (e.g. `runs/cpu/probing` kept from before the change,
and the same folder after it). For every case probed in both, of the same weights on the same data:
(probes that are the same files in both are left out) each version's probe version, tower order, per-tower validation loss of the heads, probe-seed
reliability (where both have a second head seed), and the agreement between the two versions'
scores (Pearson r over the profile's top-N tokens, both score variants). A negative agreement with a
swapped tower order is the same measurement with the towers named the other way round. Then every two
of those cases correlated under each probing (`pairs`): how far the change moves the between-run r the
book reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def compare(old_dir: Path, new_dir: Path, top_n: int) -> list[dict]:
    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.uncertainty import probe_seed_reliability, same_run_agreement
    from twotower_lib.data import load_prepared
    from twotower_lib.errors import UserError
    from twotower_lib.preference import load_artifact

    rows = []
    for new_manifest in sorted(new_dir.glob("**/manifest.json")):
        case = new_manifest.parent.relative_to(new_dir).as_posix()
        if not (old_dir / case / "manifest.json").exists():
            continue
        old, new = load_artifact(old_dir / case), load_artifact(new_dir / case)
        if old.manifest.get("files") == new.manifest.get("files"):
            continue                                            # the same probe in both: nothing changed
        same = [(m.get("identity") or {}).get("weights_sha256") or [Path(p).name for p in m.get("pair_of", [])]
                for m in (old.manifest, new.manifest)]
        if same[0] != same[1]:
            raise SystemExit(f"{case}: the two probings read different weights; compare probings of the same runs")
        data = load_prepared(new.manifest["data_path"])
        row = {"case": case}
        for name, art in (("old", old), ("new", new)):
            m = art.manifest
            row[f"{name}_version"] = (m.get("identity") or {}).get("version", "pair")   # a pair of k = 1 probes
            row[f"{name}_primary_tower"] = m["ordering"]["primary_tower"]
            row[f"{name}_val_loss"] = [round(v, 4) for k, v in m["val_loss"].items() if k.endswith("_head")]
            if "heads" in m:
                row[f"{name}_epochs"] = m["heads"]["epochs"]
                row[f"{name}_seconds"] = m["seconds"]["train_heads"]
            try:
                row[f"{name}_reliability"] = {c: round(float(r), 4) for c, r in probe_seed_reliability(art, data, top_n).items()}
            except UserError:
                pass                                            # a probe without a second head seed
        if new.manifest["towers"] > 1:
            row["agreement"] = {c: round(float(same_run_agreement(old.table, new.table, data.counts, top_n, c)), 4)
                                for c in SCORE_COLUMNS}
        rows.append(row)
    return rows


def pairs(old_dir: Path, new_dir: Path, cases: list[str], top_n: int) -> list[dict]:
    """Every two of `cases` (two-tower probes in both directories), correlated under each probing: how much a
    change of the probe moves the between-run agreements the book reads (Pearson r over the top-N tokens)."""
    from itertools import combinations

    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.uncertainty import same_run_agreement
    from twotower_lib.data import load_prepared
    from twotower_lib.preference import load_artifact

    arts = {name: {c: load_artifact(d / c) for c in cases} for name, d in (("old", old_dir), ("new", new_dir))}
    data = load_prepared(arts["new"][cases[0]].manifest["data_path"])
    return [{"a": a, "b": b, **{f"{name}_r": {c: round(float(same_run_agreement(found[a].table, found[b].table, data.counts,
                                                                                 top_n, c)), 4) for c in SCORE_COLUMNS}
                                for name, found in arts.items()}}
            for a, b in combinations(cases, 2)]


def main() -> None:
    from twotower_lib.artifacts import atomic_write_json, portable_command, provenance
    from twotower_lib.book.profiles import get_profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--profile", default="cpu", help="whose top-N the agreement is read over")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--note", default=None, help="what the two probings are, kept in the file")
    args = ap.parse_args()
    top_n = get_profile(args.profile).analysis.top_n
    rows = compare(args.old, args.new, top_n)
    cases = [r["case"] for r in rows if "agreement" in r]
    between = pairs(args.old, args.new, cases, top_n) if len(cases) > 1 else []
    if args.out:
        atomic_write_json(args.out, {"profile": args.profile, "top_n": top_n, "rows": rows, "pairs": between,
                                     "note": args.note, "provenance": provenance(),
                                     "command": portable_command("studies/probe/compare_versions.py", sys.argv[1:])})
    print(f"{'case':28} {'v':>5} {'primary':>7} {'val loss per tower (old -> new)':>40} {'agree Eq.4':>10} {'mean log':>8}")
    for r in rows:
        agree = list(r.get("agreement", {}).values()) or [float("nan")] * 2
        losses = " / ".join(f"{o:.3f}->{n:.3f}" for o, n in zip(r["old_val_loss"], r["new_val_loss"]))
        print(f"{r['case']:28} {r['old_version']}->{r['new_version']} {r['old_primary_tower']}->{r['new_primary_tower']:<4} "
              f"{losses:>40} {agree[0]:10.3f} {agree[1]:8.3f}")
    for p in between:
        print(f"{p['a']} vs {p['b']}: r old {' / '.join(f'{v:.3f}' for v in p['old_r'].values())}, "
              f"new {' / '.join(f'{v:.3f}' for v in p['new_r'].values())} (Eq. 4 / mean of log p)")


if __name__ == "__main__":
    main()
