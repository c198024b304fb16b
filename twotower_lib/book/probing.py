"""The probing stage of the book (section 02): the probing heads of every case and control, the
probe's own quality (shortfall, curves, probe-seed reliability), and the preference artifacts
the analysis sections read (`load_scores`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from twotower_lib.artifacts import read_json
from twotower_lib.book.probe_outputs import VARIANTS
from twotower_lib.book.sections import SectionContext, load_data, run_command
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name, control_name, independent_pair_name, quality_name

if TYPE_CHECKING:
    import pandas as pd





def probe_cases(ctx: SectionContext) -> pd.DataFrame:
    """Probe every trained case into 02_probing's output; return one summary row per case.

    The cases of `Profile.reliability_cases` also train heads with a second seed (`ProbeConfig.replicate`),
    for the probe-seed reliability. On a CPU the probes go side by side at the profile's `threads_per_run`,
    as training runs do (`probe_side_by_side`)."""
    import pandas as pd

    from twotower_lib.preference import load_artifact

    training = ctx.input_dir("01_training")
    names = [case_name(model, seed) for model, seed in ctx.profile.case_list()]
    for name in names:
        if not (training / name / "model.safetensors").exists():
            raise UserError(f"case {name} has no trained model in {training}; train it with:  "
                            f"{run_command('01_training', ctx.profile.name, runs_dir=ctx.root.parent)}")
    sampled = {case_name(m, s) for m, s in ctx.profile.reliability_cases()}
    paths = probe_side_by_side(ctx, [_probe_args(ctx, name, ctx.out / name, replicate=name in sampled) for name in names],
                               "probing cases")
    rows = []
    for name, path in zip(names, paths):
        m = load_artifact(path).manifest
        rows.append({"case": name, "primary tower": m["ordering"]["primary_tower"],
                     "mean p (primary)": max(m["ordering"]["mean_p"]), "mean p (secondary)": min(m["ordering"]["mean_p"]),
                     **{f"val loss, {k}": v for k, v in m["val_loss"].items()},
                     "tokens scored": m["scored_tokens"], "head epochs": m["heads"]["epochs"],
                     "minutes": round(m["seconds"]["total"] / 60, 2)})
    return pd.DataFrame(rows).set_index("case")


def probe_side_by_side(ctx: SectionContext, jobs: list[dict[str, Any]], desc: str) -> list[Path]:
    """`probe.probe_run` for every job, side by side at the profile's `train.threads_per_run` where the cores
    allow (`workers.run_jobs`; 0: one at a time on every core, with progress bars). Two single-thread probes
    side by side get through more head training than one after the other on both cores
    (`benchmarks/bench_workers.py` measures it); a probe's scores depend on its thread count only through
    float rounding, and every probe records the count it ran with."""
    from twotower_lib.probe.run import probe_run
    from twotower_lib.workers import run_jobs, worker_count

    threads = ctx.profile.train.threads_per_run
    alone = worker_count(threads, len(jobs)) == 1
    return [Path(p) for p in run_jobs(probe_run, [{**job, "show": alone} for job in jobs], threads, desc,
                                      label=lambda job: Path(job["out"]).name)]


def half_way_snapshot(run_dir: Path) -> int:
    """Tokens of a run's last weight snapshot at or before half of its training tokens: the worse model
    of the quality-gap control."""
    from twotower_lib.models import list_snapshots

    total = read_json(run_dir / "manifest.json")["tokens_seen"]
    early = [t for t, _ in list_snapshots(run_dir) if 0 < t <= total // 2]
    if not early:
        raise UserError(f"{run_dir} has no weight snapshot between 0 and half of its {total:,} training tokens; "
                        "the quality-gap control needs one (train with snapshots, the default)")
    return early[-1]


def _probe_args(ctx: SectionContext, run: str, out: Path, snapshot: int | None = None,
                replicate: bool = False) -> dict[str, Any]:
    return {"run_dir": str(ctx.input_dir("01_training") / run), "cfg": ctx.profile.probe_config(replicate),
            "snapshot": snapshot, "data_dir": str(ctx.input_dir("00_data") / "prepared"), "out": str(out)}


def probe_quality(ctx: SectionContext) -> pd.DataFrame:
    """How well every probe of 02_probing did its job, one row per probe (cases and controls).

    - *head − cooperative*: the better head's validation loss minus the cooperative model's. For a
      single-tower run (the independent control's k = 1 models) the tower carries everything its
      decoder used, so this gap is the **probe shortfall**: what the head fails to read (goal <= 0.05 nats).
    - epochs and why head training stopped; Eq. 3's relative margin (the towers' mean p apart, as a share of the
      primary's, as section 03 and the seed study read it) and whether the two order rules (mean p, Eq. 3; mean
      log p) agree.
    """
    import pandas as pd

    from twotower_lib.preference import load_artifact

    probing = ctx.out if ctx.section.name == "02_probing" else ctx.input_dir("02_probing")
    found = [(case_name(m, s), "case", probing / case_name(m, s)) for m, s in ctx.profile.case_list()]
    found += [(f"{case_name(m, s)} (untrained)", "untrained", probing / "untrained" / case_name(m, s))
              for m, s in ctx.profile.untrained_runs()]
    found += [(control_name(m, s), "independent (k = 1)", probing / "independent" / control_name(m, s))
              for m, s in ctx.profile.independent_runs()]
    rows = []
    for name, role, path in found:
        m = load_artifact(path).manifest
        loss = m["val_loss"]
        heads = [v for k, v in loss.items() if k.endswith("_head")]
        o = m["ordering"]
        rows.append({"probe": name, "role": role, "towers": m["towers"], "cooperative loss": loss["cooperative"],
                     "best head loss": min(heads), "head − cooperative": min(heads) - loss["cooperative"],
                     "shortfall": min(heads) - loss["cooperative"] if m["towers"] == 1 else float("nan"),
                     "epochs": m["heads"]["epochs"], "stopped": m["heads"]["stopped"],
                     "relative margin": o["margin"] / max(o["mean_p"]) if m["towers"] == 2 else float("nan"),
                     "order rules agree": o.get("rules_agree", True),
                     "minutes": round(m["seconds"]["total"] / 60, 2)})
    return pd.DataFrame(rows).set_index("probe")


def probing_summary(quality: pd.DataFrame, reliability: pd.DataFrame, unigram_loss: float) -> str:
    """Section 02's closing summary from its tables (`probe_quality`, `probe_reliability`): which cases learned
    context (a cooperative loss below word frequencies', with [MASK] at every BERT position), how far apart their
    towers are (Eq. 3's margin) and whether the two order rules agree, whether the heads converged, and the
    instrument's reliability and shortfall against their goals."""
    from twotower_lib.probe.config import RELIABILITY_GOAL, SHORTFALL_GOAL

    cases = quality[quality["role"] == "case"]
    loss = cases["cooperative loss"]
    flat = list(cases.index[loss >= unigram_loss])
    text = (f"The cases' cooperative losses run from {loss.min():.2f} to {loss.max():.2f} nats against word frequencies' "
            f"{unigram_loss:.2f}: " + ("every case learned context beyond them." if not flat else
                                       f"{', '.join(flat)} learned none (not below them), so {'its' if len(flat) == 1 else 'their'} "
                                       "towers have nothing to divide."))
    margin = cases["relative margin"]
    disagree = list(cases.index[~cases["order rules agree"].astype(bool)])
    text += (f" Eq. 3's margin between a case's towers runs from {margin.min():.3f} to {margin.max():.3f} of the primary's "
             "mean p; " + ("both order rules name the same primary tower in every case." if not disagree else
                           f"the two order rules name different primary towers in {', '.join(disagree)}, so every "
                           f"correlation {'it enters' if len(disagree) == 1 else 'they enter'} changes sign with the rule."))
    converged = int((quality["stopped"] == "converged").sum())
    text += f" {converged} of {len(quality)} probes' heads stopped on the held-out rule"
    shortfall = quality["shortfall"].dropna()
    if len(shortfall):
        text += (f"; on single-tower runs the heads fall short of the model's own decoder by {shortfall.max():.3f} nats at "
                 f"most (goal: {SHORTFALL_GOAL})")
    if len(reliability):
        text += (f"; two head seeds agree at {reliability.iloc[:, 0].min():.3f} at least on the {len(reliability)} "
                 f"case{'s' * (len(reliability) != 1)} probed twice (goal: {RELIABILITY_GOAL})")
    return text + "."


def probe_curves(ctx: SectionContext) -> pd.DataFrame:
    """Every case's head-training curve (long form: probe, epoch, head, split, loss) from the probe manifests."""
    import pandas as pd

    from twotower_lib.preference import load_artifact

    probing = ctx.out if ctx.section.name == "02_probing" else ctx.input_dir("02_probing")
    rows = []
    for m_, s_ in ctx.profile.case_list():
        name = case_name(m_, s_)
        m = load_artifact(probing / name).manifest
        k = m["towers"]
        curves = [(m["heads"]["curve"], "")] + ([(m["heads"]["replicate"]["curve"], " (seed 2)")]
                                                if "replicate" in m["heads"] else [])
        for curve, seed in curves:          # an older manifest holds both sets in one curve, the second past k
            for point in curve:
                for split in ("train", "heldout"):
                    for i, loss in enumerate(point[f"{split}_loss"]):
                        rows.append({"probe": name, "epoch": point["epoch"], "split": split, "loss": loss,
                                     "head": f"tower {i % k}" + (" (seed 2)" if i >= k else seed)})
    return pd.DataFrame(rows)


def probe_reliability(ctx: SectionContext, scores: dict) -> pd.DataFrame:
    """Per case probed with a second head set (`Profile.reliability_cases`): the probe-seed reliability over
    the profile's top_n tokens in both score variants (`uncertainty.probe_seed_reliability`), and whether
    the replicate heads named the same primary tower."""
    import pandas as pd

    from twotower_lib.analysis.uncertainty import probe_seed_reliability

    data = load_data(ctx)
    rows = []
    for name, art in scores.items():
        if "replicate" not in art.manifest:
            continue
        reliability = probe_seed_reliability(art, data, ctx.profile.analysis.top_n)
        rows.append({"case": name, **{f"reliability ({VARIANTS[c]})": r for c, r in reliability.items()},
            "replicate names the same primary": art.manifest["replicate"]["ordering"][0] == art.manifest["ordering"]["primary_tower"]})
    return pd.DataFrame(rows, columns=None if rows else ["case"]).set_index("case")


def compare_bert_events(ctx: SectionContext, case: str) -> pd.DataFrame:
    """Probe `case` (a BERT run) a second time with the training corruption (80/10/10) at the probed
    positions, and compare with its [MASK]-only probe: validation losses and the correlation of the
    two score vectors over top_n tokens, in both variants."""
    import pandas as pd

    from twotower_lib.analysis.correlation import SCORE_COLUMNS
    from twotower_lib.analysis.uncertainty import same_run_agreement
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import probe_run

    args = _probe_args(ctx, case, ctx.out / "comparisons" / f"{case}-corrupt")
    args["cfg"] = ctx.profile.probe_config(bert_events="corrupt")
    other = load_artifact(probe_run(**args, show=False))
    main = load_artifact(ctx.out / case)
    counts = load_data(ctx).counts
    rows = []
    for label, art in (("[MASK] at every probed position (Eq. 1)", main), ("80/10/10 as in training", other)):
        rows.append({"events": label, **{f"val loss, {k}": v for k, v in art.manifest["val_loss"].items()},
                     "primary tower": art.manifest["ordering"]["primary_tower"]})
    out = pd.DataFrame(rows).set_index("events")
    for c in SCORE_COLUMNS:
        out[f"r between the two ({VARIANTS[c]})"] = same_run_agreement(main.table, other.table, counts,
                                                                         ctx.profile.analysis.top_n, c)
    return out


def probe_controls(ctx: SectionContext) -> pd.DataFrame:
    """Probe the controls into 02_probing's output; one summary row per probed run.

    Only the pairs of `control_models` get these two (`Profile.controlled_pairs`):
    - untrained: both runs of each such pair at their snapshot at 0 tokens
      (`untrained/<case>`): heads trained on randomly initialised, frozen towers.
    - independent: per model of such a pair, its four single-tower runs
      (`independent/<run>`), then runs 1+2 and 3+4 scored as pairs (`independent/<model>-pair-1`,
      `-pair-2`) by the same rule as two towers (`probe.pair_runs`).
    - quality: the model's single-tower run 1 at its last snapshot at or before half its training
      (`half_way_snapshot`), scored as a pair with its final weights (`quality/<model>-quality`): which tokens gain most when a
      model gets better, with no second tower to divide any work with.
    """
    import pandas as pd

    from twotower_lib.preference import load_artifact
    from twotower_lib.probe.run import pair_runs, probe_run

    jobs = [_probe_args(ctx, case_name(m, s), ctx.out / "untrained" / case_name(m, s), snapshot=0)
             for m, s in ctx.profile.untrained_runs()]
    runs = ctx.profile.independent_runs()
    jobs += [_probe_args(ctx, control_name(m, s), ctx.out / "independent" / control_name(m, s)) for m, s in runs]
    paths = probe_side_by_side(ctx, jobs, "probing controls")
    rows = []
    for path in paths:
        m = load_artifact(path).manifest
        rows.append({"run": path.relative_to(ctx.out).as_posix(), "control": path.parent.name,
                     **{f"val loss, {k}": v for k, v in m["val_loss"].items()}})
    probes = paths[len(paths) - len(runs):]
    for model, seed in ctx.profile.quality_runs():
        final = ctx.out / "independent" / control_name(model, seed)
        early = half_way_snapshot(ctx.input_dir("01_training") / control_name(model, seed))
        path = probe_run(**_probe_args(ctx, control_name(model, seed), ctx.out / "quality" / f"{control_name(model, seed)}-{early}",
                                       snapshot=early), show=False)
        out = pair_runs(final, path, ctx.out / "quality" / quality_name(model), show=False)
        rows.append({"run": out.relative_to(ctx.out).as_posix(), "control": "quality",
                     "primary": "final weights" if load_artifact(out).manifest["ordering"]["primary_tower"] == 0
                     else f"the snapshot at {early:,} tokens",
                     **{f"val loss, {k}": v for k, v in load_artifact(path).manifest["val_loss"].items()}})
    for i in range(0, len(probes), 2):  # seeds 1+2 and 3+4 of each model
        model = runs[i][0]
        out = pair_runs(probes[i], probes[i + 1], ctx.out / "independent" / independent_pair_name(model, i // 2 % 2 + 1),
                        show=False)
        m = load_artifact(out).manifest
        rows.append({"run": out.relative_to(ctx.out).as_posix(), "control": "independent",
                     "primary": control_name(*runs[i + m['ordering']['primary_tower']])})
    return pd.DataFrame(rows).set_index("run") if rows else pd.DataFrame()
