"""Fig. 5 against its control: the share of the ICA components' values within [-1, 1] for each seed of the
profile's ICA reference family, trained and at 0 tokens (the same towers untrained: each run's first snapshot).

Section 5.3 stacks one row per token occurrence, so the rows are weighted by frequency: a few frequent tokens
dominate every component, and an untrained embedding's components come out sparse too. The study trains the
reference family's four seeds in a pipeline run of its own, then collects:

    python -m twotower_lib run 01_training --profile cpu \\
        -p train.cases bert-large:1,bert-large:2,bert-large:3,bert-large:4 --runs-dir DIR
    python -m studies.fig5_control --profile cpu --runs DIR     # results/fig5_control/shares.json, then the book's parts
    python -m studies.fig5_control book                         # the book's parts alone, from the committed shares
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from twotower_lib import paper
from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.errors import UserError

RESULT = PROJECT_ROOT / "results" / "fig5_control" / "shares.json"
COMMAND = "python -m studies.fig5_control --profile {profile} --runs DIR"


def shares(root: Path, profile) -> list[dict]:
    """One row per seed of `profile`'s ICA reference family trained in the pipeline run `root`
    (`<runs dir>/<profile>/`): Fig. 5's share within [-1, 1] of its trained embedding and of its first snapshot's."""
    from twotower_lib.analysis.word_groups import fig5_within_1
    from twotower_lib.book.analyses import embedding_ica
    from twotower_lib.data import load_prepared
    from twotower_lib.models import load_embedding

    family = profile.analysis.ica_reference.split(":")[0]
    runs = sorted(d for d in (root / "training").glob(f"{family}-s*") if (d / "config.json").is_file())
    if not runs:
        raise UserError(f"{root / 'training'} holds no {family} run; train its seeds first:  python -m twotower_lib run "
                        f"01_training --profile {root.name} -p train.cases {family}:1,{family}:2,{family}:3,{family}:4 "
                        f"--runs-dir {root.parent}")
    data = load_prepared(root / "data" / "prepared")
    rows = []
    for run in runs:
        row = {"run": run.name}
        for name, snapshot in (("trained", None), ("untrained", 0)):
            embedding = load_embedding(run, snapshot)
            fitted, token_ids, components, _ = embedding_ica(embedding, data, profile)
            row[name] = fig5_within_1(components, token_ids, data.tokens, data.counts)
            row[f"{name} converged"] = bool(fitted.ica.converged)
        rows.append(row)
        print(f"{run.name}: trained {row['trained']:.3f}, untrained {row['untrained']:.3f}", flush=True)
    return rows


def load(path: Path = RESULT) -> pd.DataFrame:
    """The committed shares, one row per seed (empty where none were collected)."""
    return pd.DataFrame(read_json(path)["rows"]) if path.is_file() else pd.DataFrame(columns=["run", "trained", "untrained"])


def verdict(table: pd.DataFrame, profile: str) -> dict:
    """The scorecard's Fig. 5 verdict over seeds (`paper.fig5_seed_verdict`), in the form the scorecard reads."""
    t, u = table["trained"], table["untrained"]
    return {"profile": profile, "verdict": paper.fig5_seed_verdict(t.tolist(), u.tolist()), "over": "seeds",
            "seeds": f"{t.median():.0%} within [-1, 1], untrained {u.median():.0%} (medians of {len(table)} seeds)",
            "spread": f"{t.min():.0%} to {t.max():.0%}, untrained {u.min():.0%} to {u.max():.0%}; trained above "
                      f"untrained in {int((t > u).sum())} of {len(table)} seeds",
            "caveat": "judged against the same towers untrained: frequency-weighted rows are sparse untrained too",
            "controls": "the control is each seed's towers at 0 tokens, their rows weighted by frequency as Section "
                        "5.3's are"}


def sentence(table: pd.DataFrame, profile: str) -> str:
    """What section 05 says of the control, every number from the committed shares."""
    if table.empty:
        return "*Fig. 5's control is not committed yet (`python -m studies.fig5_control`).*"
    v = verdict(table, profile)
    return (f"**Against the untrained towers** ({len(table)} seeds of the `{profile}` profile's ICA reference family, "
            f"`results/fig5_control/`): {v['seeds']}; {v['spread']}. A share above a Gaussian's "
            f"({paper.GAUSSIAN_WITHIN_1:.0%}) says nothing alone: with one row per token occurrence, a few frequent "
            f"tokens weigh on every component, trained or not. Only a trained share above its own untrained one is sparsity that "
            f"training made, so the verdict over seeds is **{v['verdict']}** (`paper.fig5_seed_verdict`).")


def write_book(path: Path = RESULT) -> Path:
    """Section 05's sentence and the scorecard's Fig. 5 verdict at the study's profile into
    `results/fig5_control/book.json`."""
    from twotower_lib.book import study_parts

    found = read_json(path) if path.is_file() else {}
    table, profile = load(path), found.get("profile", "cpu")
    return study_parts.write(path.parent, {f"FIG5_CONTROL@{profile}": sentence(table, profile)}, {},
                             [path] if path.is_file() else [], "python -m studies.fig5_control book",
                             verdicts={f"fig5@{profile}": verdict(table, profile)} if len(table) else {})


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["book"]:
        print(f"book parts -> {write_book()}")
        return 0
    from twotower_lib.book.profiles import get_profile

    ap = argparse.ArgumentParser(description="Fig. 5's share within [-1, 1], trained and untrained, per seed")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--runs", type=Path, required=True, help="the runs directory of the reference family's pipeline run")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    profile = get_profile(args.profile)
    rows = shares(args.runs.expanduser() / args.profile, profile)
    atomic_write_json(args.out, {"profile": args.profile, "rows": rows, "command": COMMAND.format(profile=args.profile),
                                 "provenance": provenance()})
    print(f"wrote {args.out}: {len(rows)} seeds")
    if args.out == RESULT:
        print(f"book parts -> {write_book()}")
    return 0
