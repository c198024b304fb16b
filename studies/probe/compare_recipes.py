"""Probes of the same frozen runs with different recipes: the earlier probe, the untied head (the
authors' code) trained to a held-out plateau on raw tower states or on each tower's slice of the
joint LayerNorm, the tied head (Eq. 2 with GELU and LayerNorm) to a plateau, both heads with a
cool-down after the plateau, the profile's default (the linear head, a two-epoch cool-down whose
iterates are averaged), and the recipe of the authors' released code (`ProbeConfig.as_released`).

    python -m studies.probe.compare_recipes [--profile cpu] [--runs gpt-s1,gpt-s2,gpt-k1-s1] [--reuse]
                                               [--probe "as released"]

For each run and recipe: minutes, head epochs, the best head's validation loss minus the
cooperative model's, and the probe-seed reliability over the profile's top_n tokens in both score
variants; for each recipe, the correlation between the runs (a same-configuration pair) and, per
run, how well the recipes agree. Probes go to runs/<profile>/probing/comparisons/ (the default's to
the profile's own probing directory); an up-to-date probe is reused, and with `--reuse` nothing is
probed but the recipes named by `--probe`: the probes already in the recipes' directories are read
(each row names the probe version that made it; a recipe missing on a run is left out there). A
single-tower run (gpt-k1-s1) gives each recipe's shortfall (its head's loss minus the cooperative
model's: what the probe fails to read out) and takes no part in the pairs. Writes
results/probe/recipes.json (with provenance), which section 02 shows.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from itertools import combinations
from pathlib import Path

RESULT = Path(__file__).resolve().parents[2] / "results" / "probe" / "recipes.json"  # report.RECIPES


def main() -> None:
    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.uncertainty import probe_seed_reliability, same_run_agreement
    from twotower_lib.artifacts import atomic_write_json, provenance
    from twotower_lib.data import load_prepared
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import PROBE_VERSION, ProbeConfig, probe_run
    from studies.probe.report import DEFAULT_RECIPE
    from twotower_lib.book.profiles import get_profile, profile_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--runs", default="gpt-s1,gpt-s2,gpt-k1-s1")
    ap.add_argument("--reuse", action="store_true", help="probe nothing: use the probes already in the recipes' "
                                                         "directories, whatever probe version made them (a recipe "
                                                         "missing on a run is left out there)")
    ap.add_argument("--probe", default="", help="with --reuse: recipes to probe all the same (comma-separated names)")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    root = profile_dir(profile.name)
    data = load_prepared(root / "data" / "prepared")
    runs = args.runs.split(",")
    plateau = dict(lr=1e-3, lr_drops=1, cooldown_epochs=0, cooldown_average=False)  # a rate drop at the first plateau, stop at the second
    recipes = {"earlier": (ProbeConfig.legacy(train_positions=profile.probe.train_positions, replicate=True), "legacy-{run}"),
               "untied, plateau, raw": (profile.probe_config(True, head="mlp", features="raw", **plateau), "{run}-raw"),
               "untied, plateau": (profile.probe_config(True, head="mlp", **plateau), "{run}-joint_ln"),
               "tied, plateau": (profile.probe_config(True, head="tied", **plateau), "{run}-tied"),
               "untied, cool-down": (profile.probe_config(True, head="mlp", lr=1e-3), "{run}-wsd"),
               "tied, cool-down": (profile.probe_config(True, head="tied", cooldown_epochs=1, cooldown_average=False),
                                   "{run}-tied-cooldown"),
               DEFAULT_RECIPE: (profile.probe_config(True), None),
               "as released": (ProbeConfig.as_released(train_positions=profile.probe.train_positions, replicate=True),
                               "released-{run}")}
    unknown = {r for r in args.probe.split(",") if r} - set(recipes)
    if unknown:
        raise SystemExit(f"--probe names unknown recipe(s) {sorted(unknown)}; choose among {sorted(recipes)}")
    tables, rows, pairs = {}, [], []
    for recipe, (cfg, name) in recipes.items():
        for run in runs:
            out = root / "probing" / (run if name is None else f"comparisons/{name.format(run=run)}")
            if name is None and not out.exists() and (root / "probing" / "independent" / run).exists():
                out = root / "probing" / "independent" / run    # a single-tower run: the profile's own control probe
            if args.reuse and recipe not in args.probe.split(","):
                if not (out / "preference.parquet").exists():
                    print(f"{recipe} on {run}: no probe in {out}, left out")
                    continue
                art = load_artifact(out)
            else:
                art = load_artifact(probe_run(root / "training" / run, cfg, data_dir=data.path, out=out, show=False))
            m = art.manifest
            heads = [v for k, v in m["val_loss"].items() if k.endswith("_head")]
            row = {"run": run, "recipe": recipe, "probe_version": m["identity"]["version"], "towers": m["towers"],
                   "minutes": round(m["seconds"]["total"] / 60, 2), "epochs": m["heads"]["epochs"],
                   "head_minus_cooperative": round(min(heads) - m["val_loss"]["cooperative"], 4)}
            if m["towers"] == 2:                       # a single tower has no preference score to agree on
                tables[recipe, run] = art.table
                row |= {f"reliability_{c}": round(r, 4) for c, r in probe_seed_reliability(art, data, profile.analysis.top_n).items()}
            rows.append(row)
            print(rows[-1], flush=True)
        for a, b in combinations(runs, 2):
            if (recipe, a) not in tables or (recipe, b) not in tables:
                continue
            pairs.append({"recipe": recipe, "a": a, "b": b,
                          **{f"r_{c}": round(same_run_agreement(tables[recipe, a], tables[recipe, b], data.counts,
                                                                profile.analysis.top_n, c), 4) for c in SCORE_COLUMNS}})
    across = [{"run": run, "a": ra, "b": rb,
               **{f"r_{c}": round(same_run_agreement(tables[ra, run], tables[rb, run], data.counts, profile.analysis.top_n, c), 4)
                  for c in SCORE_COLUMNS}}
              for run in runs for ra, rb in combinations(recipes, 2) if (ra, run) in tables and (rb, run) in tables]
    atomic_write_json(RESULT, {"profile": profile.name, "top_n": profile.analysis.top_n, "probe_version": PROBE_VERSION,
                               "recipes": {k: asdict(cfg) for k, (cfg, _) in recipes.items()},
                               "runs": rows, "pairs": pairs, "across_recipes": across,
                               "data_hash": data.data_hash, "provenance": provenance(),
                               "command": f"python -m studies.probe.compare_recipes --profile {profile.name} "
                                          f"--runs {args.runs}" + (" --reuse" if args.reuse else "")
                                          + (f" --probe '{args.probe}'" if args.probe else "")})
    print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
