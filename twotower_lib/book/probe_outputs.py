"""The probes' outputs as the analysis sections read them: every case's preference artifact, the controls'
artifacts, the quality-gap control's, and which cases form same-configuration pairs. Section 02 writes them;
sections 03-06 load them from here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twotower_lib.book.sections import SectionContext
from twotower_lib.run_names import case_name, independent_pair_name, quality_name

if TYPE_CHECKING:
    import pandas as pd

# The two score variants by their column in the preference table.
VARIANTS = {"score": "log of mean p, Eq. 4", "score_logmean": "mean of log p, authors' code"}


def tower_order(scores: dict) -> pd.DataFrame:
    """Per case (`load_scores`): which tower Eq. 3 calls primary (the higher mean probability), the
    relative margin between the two towers' mean probabilities, the tower the authors' rule (the
    higher mean log-probability) would pick, and whether the two agree. The sign of every r in
    Table 2 rests on this choice."""
    import pandas as pd

    rows = []
    for name, art in scores.items():
        o = art.manifest["ordering"]
        p, logp = o["mean_p"], o["mean_logp"]
        rows.append({"case": name, "primary tower (mean p, Eq. 3)": o["primary_tower"],
                     "relative margin": abs(p[0] - p[1]) / max(p),
                     "primary tower (mean log p)": int(logp[1] > logp[0]),
                     "rules agree": o.get("rules_agree", True)})
    return pd.DataFrame(rows).set_index("case")



def load_controls(ctx: SectionContext) -> list[tuple[str, str, dict]]:
    """The control artifacts 02_probing wrote, as (control, model, {label: artifact}) with two
    artifacts each, to be correlated with one another: the untrained runs of each same-configuration
    pair, and each model's two independent pairs."""
    from twotower_lib.preference import load_artifact

    probing = ctx.input_dir("02_probing")
    out = []
    if "untrained" in ctx.profile.analysis.controls:
        for pair in ctx.profile.controlled_pairs():
            names = [case_name(*run) for run in pair]
            out.append(("untrained", pair[0][0],
                        {f"{name} (untrained)": load_artifact(probing / "untrained" / name) for name in names}))
    for model in dict.fromkeys(m for m, _ in ctx.profile.independent_runs()):
        names = [independent_pair_name(model, i) for i in (1, 2)]
        out.append(("independent", model,
                    {f"independent {n}": load_artifact(probing / "independent" / n) for n in names}))
    return out


def load_quality(ctx: SectionContext) -> dict:
    """The quality-gap control artifact of each controlled model (02_probing's `quality/`), by model."""
    from twotower_lib.preference import load_artifact

    return {model: load_artifact(ctx.input_dir("02_probing") / "quality" / quality_name(model))
            for model, _ in ctx.profile.quality_runs()}


def load_scores(ctx: SectionContext) -> dict:
    """The preference artifact of every case, by case name (for the analysis sections)."""
    from twotower_lib.preference import check_same_vocabulary, load_artifact

    probing = ctx.out if ctx.section.name == "02_probing" else ctx.input_dir("02_probing")
    results = {case_name(m, s): load_artifact(probing / case_name(m, s)) for m, s in ctx.profile.case_list()}
    check_same_vocabulary(list(results.values()))
    return results


def same_config_pairs(ctx: SectionContext) -> list[tuple[str, str]]:
    """Pairs of cases that differ only in the seed (the paper's Bert-large run 1 and run 2)."""
    return [(case_name(*a), case_name(*b)) for a, b in ctx.profile.same_config_pairs()]
