"""The decisions page (`book/decisions.md`): why each profile is what it is, with the numbers each
choice rests on. The page's prose names its numbers as `{{ key }}`; `numbers` computes every one
from the committed results (the emergence curves in `results/emergence/`, the profiles published in
`results/profiles/`) when the book is built, so the prose cannot drift from the data and the code
does not carry measurements in its comments."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from twotower_lib.book import publish
from twotower_lib.book.paper_tables import number, tokens_label as tokens
from twotower_lib.book import emergence_curves as em
from twotower_lib.errors import UserError
from twotower_lib.probe_config import probe_label
from twotower_lib.run_names import model_of

KEY = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def _n(x: float, digits: int = 2) -> str:
    """A number as the page prints it: fixed digits, a true minus sign."""
    return number(x, f".{digits}f")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _snapshot(curves: pd.DataFrame, config: str, tokens: int | None = None) -> pd.DataFrame:
    """A configuration's rows (one per seed pair) at the snapshot nearest `tokens` (None: its last)."""
    g = curves[curves["config"] == config]
    if g.empty:
        raise UserError(f"the decisions page needs the emergence curve {config!r}, which results/emergence/ lacks; "
                        f"produce it with  python -m studies.emergence {config}")
    have = np.sort(g["tokens"].unique())
    t = have[-1] if tokens is None else have[np.abs(have - tokens).argmin()]
    return g[g["tokens"] == t]


def _gaps(rows: pd.DataFrame) -> pd.Series:
    """Every run's tower gap (Eq. 3's relative gap in mean p) at a snapshot, each run once."""
    return pd.concat([rows.set_index(rows["pair"].str.split("-").str[0])["margin_a"],
                      rows.set_index(rows["pair"].str.split("-").str[1])["margin_b"]]).groupby(level=0).first()


def _pairs(prefix: str, curves: pd.DataFrame, config: str) -> dict[str, str]:
    """A configuration's end (`curves.run_ends`: mean, SD and range of r over its seed pairs, validation
    loss), how many pairs are positive, and its runs' tower gaps."""
    rows, end = _snapshot(curves, config), em.run_ends(curves, [config]).loc[config]
    gaps = _gaps(rows)
    return {f"{prefix}_pairs": str(int(end["seed pairs"])), f"{prefix}_mean": _n(end["r"]), f"{prefix}_sd": _n(end["r_sd"]),
            f"{prefix}_min": _n(end["r_min"]), f"{prefix}_max": _n(end["r_max"]),
            f"{prefix}_positive": str(int((rows["r"] > 0).sum())), f"{prefix}_loss": _n(end["val loss"]),
            f"{prefix}_abs_min": _n(rows["r"].abs().min()), f"{prefix}_abs_max": _n(rows["r"].abs().max()),
            f"{prefix}_tokens": tokens(end["tokens"]),
            f"{prefix}_gap_min": _pct(gaps.min()), f"{prefix}_gap_max": _pct(gaps.max())}


def _one(key: str, rows: pd.DataFrame) -> dict[str, str]:
    """A one-pair snapshot: r, |r|, its 95% interval (resampling validation documents), the towers' gaps, and
    where the curve records them r under the mean of log p and the validation-text ceiling."""
    row, gaps = rows.iloc[0], _gaps(rows)
    return {key: _n(row["r"]), f"{key}_abs": _n(abs(row["r"])), f"{key}_at": tokens(row["tokens"]), f"{key}_ci": f"[{_n(row['ci_low'])}, {_n(row['ci_high'])}]",
            f"{key}_gap_min": _pct(gaps.min()), f"{key}_gap_max": _pct(gaps.max()),
            f"{key}_mean_log": _n(row["r_mean_log"]) if pd.notna(row["r_mean_log"]) else "not recorded",
            f"{key}_ceiling": _n(row["ceiling"]) if pd.notna(row["ceiling"]) else "not measured"}


def study_numbers(curves: pd.DataFrame) -> dict[str, str]:
    """The emergence study's numbers behind the profiles' choices."""
    out: dict[str, str] = {}
    earlier = em.load_curves(em.EARLIER_DIR) if any(em.EARLIER_DIR.glob("*.parquet")) else curves.iloc[:0]
    for prefix, config in (("bert_small", "bert-cpu-small-v8192"), ("bert_small_const", "bert-cpu-small-v8192-4M-const"),
                           ("bert_large_const", "bert-cpu-v8192-2M-const"), ("gpt_1m", "gpt-cpu-v8192-1M"),
                           ("gpt_1m_lr3", "gpt-cpu-v8192-1M-lr3e-3"), ("gpt_1m_const", "gpt-cpu-v8192-1M-const"),
                           ("gpt_2m", "gpt-cpu-v8192-2M-4seeds")):
        out.update(_pairs(prefix, curves, config))
    for key, config, tokens in (("bert_large_1M", "bert-cpu-v8192", 1 << 20), ("bert_large_2M", "bert-cpu-v8192", 1 << 21),
                                ("bert_large_4M", "bert-cpu-v8192", 1 << 22), ("bert_large_end", "bert-cpu-v8192", None),
                                ("gpt_long_1M", "gpt-cpu-v8192", 1 << 20), ("gpt_long_2M", "gpt-cpu-v8192", 1 << 21),
                                ("gpt_long_4M", "gpt-cpu-v8192", None), ("bert_base_16M", "bert-cpu-small-v8192-16M", None),
                                ("bert_base_16M_at_4M", "bert-cpu-small-v8192-16M", 1 << 22),
                                ("bert_base_16M_s3s4", "bert-cpu-small-v8192-16M-s3s4", None),
                                ("bert_base_16M_s3s4_at_4M", "bert-cpu-small-v8192-16M-s3s4", 1 << 22),
                                ("deep_1M", "bert-cpu-deep-v8192", 1 << 20), ("deep_2M", "bert-cpu-deep-v8192", 1 << 21),
                                ("deep_4M", "bert-cpu-deep-v8192", None), ("wide_2M", "bert-cpu-wide-v8192", 1 << 21),
                                ("wide_4M", "bert-cpu-wide-v8192", None), ("elmo_0", "elmo-cpu-v8192", 0),
                                ("elmo_1M", "elmo-cpu-v8192", 1 << 20), ("elmo_2M", "elmo-cpu-v8192", None)):
        out.update(_one(key, _snapshot(curves, config, tokens)))
        if config in earlier["config"].values:   # measured again: the kept curve's point too, as `{key}_earlier`
            kept = _snapshot(earlier, config, tokens)
            if tokens is None or abs(kept["tokens"].iloc[0] - tokens) <= 0.1 * tokens:   # where it has that point
                out.update(_one(f"{key}_earlier", kept))
    deep = curves[(curves["config"] == "bert-cpu-deep-v8192") & (curves["tokens"] > 0)]
    deep_gaps = pd.concat([deep["margin_a"], deep["margin_b"]])
    out.update(deep_gap_min=_pct(deep_gaps.min()), deep_gap_max=_pct(deep_gaps.max()),
               elmo_loss=_n(_snapshot(curves, "elmo-cpu-v8192")[["val_loss_a", "val_loss_b"]].mean(axis=None)),
               v4096_max=_n(curves.loc[(curves["config"] == "bert-cpu-v4096") & (curves["tokens"] > 0), "r"].abs().max()))
    relation = em.margin_relation(curves)["corr(|r|, smaller gap)"]
    out.update(gap_corr_gpt=_n(relation["gpt"]), gap_corr_bert=_n(relation["bert"]))
    speed = em.training_speed()
    out.update(gpt_speed=f"{speed['gpt-cpu-v8192']:,.0f}", bert_speed=f"{speed['bert-cpu-v8192']:,.0f}",
               elmo_speed=f"{speed['elmo-cpu-v8192']:,.0f}",
               bert_over_gpt=f"{speed['bert-cpu-v8192'] / speed['gpt-cpu-v8192']:.1f}")
    out["study_probe"] = em.probes_used(curves)
    if "gpt-cpu-v8192-2M-4seeds" in earlier["config"].values:   # the same seeds with the earlier probe
        out.update(_pairs("gpt_2m_earlier", earlier, "gpt-cpu-v8192-2M-4seeds"))
    for key, config in (("gpt_2m", "gpt-cpu-v8192-2M-4seeds"), ("bert_base_16M", "bert-cpu-small-v8192-16M")):
        out[f"{key}_probe"] = curves.loc[curves["config"] == config, "probe"].iloc[0]
        if config in earlier["config"].values:
            out[f"{key}_earlier_probe"] = earlier.loc[earlier["config"] == config, "probe"].iloc[0]
    return out


def against_controls(rows: pd.DataFrame) -> str:
    """Which of a profile's same-configuration pairs (`publish.same_config_table` rows) count as above their
    controls, by the scorecard's rule (their `verdict`: the 95% CI above every control of the pair's own model,
    and above 0), as one sentence. Why computed: which pairs pass changes when a profile is measured again."""
    from twotower_lib.book.paper_tables import MODEL_NAMES

    names = rows["pair"].str.split(" vs ").str[0].map(lambda run: MODEL_NAMES.get(model_of(run), run))
    above = rows["verdict"].isin(("reproduced", "partly"))
    if above.all():
        return (f"Each pair's 95% CI lies above every control of its own model (the highest: "
                f"{_n(rows['highest control'].max())}) and above 0.")
    below = "; ".join(f"{n}: CI [{_n(lo)}, {_n(hi)}], highest control {_n(c)}"
                      for n, lo, hi, c in zip(names[~above], rows["ci_low"][~above], rows["ci_high"][~above],
                                              rows["highest control"][~above]))
    if not above.any():
        return f"No pair's 95% CI lies above every control of its own model and above 0 ({below})."
    passed = (f"The {names[above].iloc[0]} pair's 95% CI lies" if above.sum() == 1 else
              f"The {' and '.join(names[above])} pairs' 95% CIs lie")
    return (f"{passed} above every control of its own model and above 0; "
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
        out.update({k: _n(row["r"]), f"{k}_ci": f"[{_n(row['ci_low'])}, {_n(row['ci_high'])}]",
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
                    f"{k}_probe": "probe version " + probe_label(pub["probe"]["version"], pub["probe"]["config"].get("precondition"))
                    if "probe" in pub else "an earlier probe"})
    return out


def design_numbers() -> dict[str, str]:
    """The settings the page names: the profiles' budgets (`cpu_gpt_budget`, `cpulong_bert_base_budget`, …),
    the schedule's warm-up share and BERT's masked share, read from the code that uses them."""
    import inspect

    from twotower_lib.book.profiles import get_profile
    from twotower_lib.models import make_batch
    from twotower_lib.train_config import TrainConfig

    out = {"warmup": f"{100 * TrainConfig.__dataclass_fields__['warmup_fraction'].default:.0f}%",
           "mask_rate": f"{100 * inspect.signature(make_batch).parameters['mask_prob'].default:.0f}%"}
    for name in ("cpu", "cpu-long"):
        profile = get_profile(name)
        for model in ("elmo", "gpt", "bert-base", "bert-large"):
            out[f"{_key(name, model + '-s1')}_budget"] = tokens(profile.tokens_for(model))
        out[f"{_key(name)}_bert_budget"] = tokens(profile.tokens_for("bert-large"))
    return out


def numbers(curves: pd.DataFrame | None = None, published: dict | None = None) -> dict[str, str]:
    """Every `{{ key }}` of the decisions page, computed from the committed results and the profiles."""
    curves = em.load_curves() if curves is None else curves
    published = publish.load_published() if published is None else published
    return {**study_numbers(curves), **published_numbers(published), **design_numbers()}


def fill(text: str, values: dict[str, str] | None = None) -> str:
    """`text` with every `{{ key }}` replaced by its number; a clear error naming any key with none."""
    values = numbers() if values is None else values
    missing = sorted({m.group(1) for m in KEY.finditer(text)} - set(values))
    if missing:
        raise UserError(f"a book page names numbers that no code computes: {', '.join(missing)}; add them to "
                        "twotower_lib.book.decisions.numbers (or a study's results/<study>/book.json) or fix the page")
    return KEY.sub(lambda m: values[m.group(1)], text)
