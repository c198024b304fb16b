"""The decisions study: why each profile is what it is, with the numbers each choice rests on
(`book/decisions.md`). The page's prose names its numbers as `{{ key }}`; this report computes them from
the profiles published in `results/profiles/` and from the profiles' settings (`numbers`) and writes them
into `results/decisions/book.json`, which the book fills the page from (with the emergence study's
numbers, `results/emergence/book.json`), so the prose cannot drift from the data and the code carries
no measurements in its comments. Re-run it after `publish`:

    python -m studies.decisions
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from twotower_lib.book import publish, study_parts
from twotower_lib.book.paper_tables import interval, number, tokens_label as tokens
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.probe.config import probe_label
from twotower_lib.run_names import model_of

RESULTS = PROJECT_ROOT / "results" / "decisions"


def _n(x: float, digits: int = 2) -> str:
    """A number as the page prints it: fixed digits, a true minus sign."""
    return number(x, f".{digits}f")


def against_controls(rows: pd.DataFrame) -> str:
    """Which of a profile's same-configuration pairs (`publish.same_config_table` rows) count as above their
    controls, by the scorecard's rule (their `verdict`: the 95% CI of |r| above every control's |r| of the pair's
    own model), as one sentence. Why computed: which pairs pass changes when a profile is measured again."""
    from twotower_lib.book.paper_tables import MODEL_NAMES

    names = rows["pair"].str.split(" vs ").str[0].map(lambda run: MODEL_NAMES.get(model_of(run), run))
    above = rows["verdict"].isin(("reproduced", "partly"))
    if above.all():
        return (f"Each pair's 95% CI of |r| lies above every control's |r| of its own model (the highest: "
                f"{_n(rows['highest control'].max())}).")
    below = "; ".join(f"{n}: CI [{_n(lo)}, {_n(hi)}], highest control {_n(c)}"
                      for n, lo, hi, c in zip(names[~above], rows["ci_low"][~above], rows["ci_high"][~above],
                                              rows["highest control"][~above]))
    if not above.any():
        return f"No pair's 95% CI of |r| lies above every control's |r| of its own model ({below})."
    passed = (f"The {names[above].iloc[0]} pair's 95% CI of |r| lies" if above.sum() == 1 else
              f"The {' and '.join(names[above])} pairs' 95% CIs of |r| lie")
    return (f"{passed} above every control's |r| of its own model; "
            f"not {' or '.join(n + chr(39) + 's' for n in names[~above])} ({below}).")


def _key(profile: str, run: str | None = None) -> str:
    """A published number's key: `cpulong`, or with a run's model `cpulong_bert_base`."""
    return profile.replace("-", "") + ("" if run is None else "_" + model_of(run).replace("-", "_"))


def published_numbers(published: dict) -> dict[str, str]:
    """Each published profile's same-configuration pairs (`cpulong_gpt`, …), its cost and probe version."""
    out: dict[str, str] = {}
    pairs = publish.same_config_table(published)
    for _, row in pairs.iterrows():
        k = _key(row["profile"], row["pair"].split(" vs ")[0])
        out.update({k: _n(row["r"]), f"{k}_ci": interval(row["r"], row["ci_low"], row["ci_high"], _n),
                    f"{k}_control": _n(row["highest control"])})
    for profile, pub in published.items():  # the authors' variant; the runs whose primary tower depends on the rule
        summary = pub["sections"].get("03_correlations", {}).get("summary", {})
        for pair in summary.get("same_config_logmean", []):
            out[f"{_key(profile, pair['a'])}_mean_log"] = _n(pair["r"])
        probing = pub["sections"].get("02_probing", {}).get("summary", {})
        if "order_rules_disagree" in probing:
            out[f"{_key(profile)}_rules_disagree"] = ", ".join(f"`{r}`" for r in probing["order_rules_disagree"]) or "no run"
    for profile, rows in pairs.groupby("profile"):
        k = _key(profile)
        out.update({f"{k}_control_max": _n(rows["highest control"].max()), f"{k}_abs_min": _n(rows["r"].abs().min()),
                    f"{k}_abs_max": _n(rows["r"].abs().max()), f"{k}_against_controls": against_controls(rows)})
    for _, row in publish.overview(published).iterrows():
        pub, k = published[row["profile"]], _key(row["profile"])
        out.update({f"{k}_train_minutes": f"{row['run-minutes of training']:.0f}", f"{k}_runs": str(row["training runs"]),
                    f"{k}_cpu": row["CPU"],
                    f"{k}_probe": "probe version " + probe_label(pub["probe"]["version"], pub["probe"]["config"].get("precondition"))
                    if "probe" in pub else "an earlier probe"})
    return out


def design_numbers() -> dict[str, str]:
    """The settings the page names: the profiles' budgets (`cpu_gpt_budget`, `cpulong_bert_base_budget`, …),
    the schedule's warm-up share and BERT's masked share, read from the code that uses them."""
    import inspect

    from twotower_lib.book.profiles import get_profile
    from twotower_lib.models import make_batch
    from twotower_lib.train.config import TrainConfig

    out = {"warmup": f"{100 * TrainConfig.__dataclass_fields__['warmup_fraction'].default:.0f}%",
           "mask_rate": f"{100 * inspect.signature(make_batch).parameters['mask_prob'].default:.0f}%"}
    for name in ("cpu", "cpu-long"):
        profile = get_profile(name)
        for model in ("elmo", "gpt", "bert-base", "bert-large"):
            out[f"{_key(name, model + '-s1')}_budget"] = tokens(profile.tokens_for(model))
        out[f"{_key(name)}_bert_budget"] = tokens(profile.tokens_for("bert-large"))
    return out


def numbers(published: dict | None = None) -> dict[str, str]:
    """The `{{ key }}` numbers of the decisions page this study computes: the published profiles' and the
    profiles' settings. The emergence study's numbers come from its own book parts."""
    published = publish.load_published() if published is None else published
    return {**published_numbers(published), **design_numbers()}


def write_book(results: Path = RESULTS, published_dir: Path = publish.RESULTS_DIR) -> Path:
    """The page's numbers into `results/decisions/book.json`, from every published profile's file."""
    published = publish.load_published(published_dir)
    return study_parts.write(Path(results), {}, numbers(published), [Path(published_dir) / "*.json"],
                             "python -m studies.decisions")
