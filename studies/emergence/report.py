"""The emergence study's report: its committed curves (`results/emergence/*.parquet`, written by
`studies.emergence.study`) read and summarised — the spread over seed pairs, each run's end, the relation
to the tower gap, the comparisons of probes, sizes and schedules — and written as the book's parts
(`write_book`: section 07's tables, charts and sentences, and the numbers of the decisions page) into
`results/emergence/book.json`. Nothing here trains or probes.

    python -m studies.emergence book
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from twotower_lib import paper
from twotower_lib.paper import SAME_CONFIG_R
from twotower_lib.artifacts import read_json
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.book.tables import full_width
from twotower_lib.book.paper_tables import number, tokens_label
from twotower_lib.errors import UserError
from twotower_lib.probe.config import CURRENT_PROBE, probe_label
from twotower_lib.run_names import seed_pair, seed_pair_name


RESULTS_DIR = PROJECT_ROOT / "results" / "emergence"
EARLIER_DIR = RESULTS_DIR / "earlier-probe"
DEFAULT_LR = 1e-3  # the peak of configs/deepspeed_cpu.json (the paper's), used where a configuration sets none
# The columns of a committed curve (one row per pair of seeds and snapshot), as the study writes them.
CURVE_COLUMNS = ["config", "pair", "tokens", "r", "ci_low", "ci_high", "p_value", "r_partial_logfreq", "n_tokens",
                 "val_loss_a", "val_loss_b", "head_loss_a", "head_loss_b", "margin_a", "margin_b",
                 "primary_a", "primary_b", "r_physical", "ceiling", "r_mean_log"]  # curves kept after being measured again, for the book to compare


def curve_probe(meta: dict) -> str:
    """The probe that measured a committed curve, by its name in the book: "version (whitened or not)" for
    curves that record it, or the earliest probe's settings (curves written before probes had versions
    in their manifests: `mlp` heads on raw tower states for a fixed number of epochs, BERT scored with
    the training corruption)."""
    cfg = meta["probe_config"]
    if "probe_version" in meta:
        return probe_label(meta["probe_version"], cfg.get("precondition"))
    return f"earliest ({cfg.get('head', 'mlp')} heads, {cfg.get('epochs')} fixed epochs)"


def load_curves(results_dir: str | Path = RESULTS_DIR, names: list[str] | None = None) -> pd.DataFrame:
    """Every committed curve (or `names`), one row per (configuration, pair of seeds, tokens), with its
    study config and the probe that measured it (`curve_probe`)."""
    results_dir = Path(results_dir)
    frames = []
    for path in sorted(results_dir.glob("*.parquet")):
        if names is not None and path.stem not in names:
            continue
        meta = read_json(path.with_suffix(".json"))
        table = pd.read_parquet(path)
        if "pair" not in table:  # written before configurations could have more than two seeds
            table.insert(1, "pair", seed_pair_name(*meta["config"]["seeds"][:2]))
        table = table.reindex(columns=CURVE_COLUMNS)  # columns added since (the ceiling) are NaN in older curves
        frames.append(table.assign(model_type=meta["config"]["model_type"], preset=meta["config"]["preset"],
                                   vocab_size=meta["config"]["vocab_size"], top_n=meta["top_n"],
                                   # written before the schedule could be set: the DeepSpeed config's 1e-3, decay to 0
                                   lr=meta["config"].get("lr") or DEFAULT_LR,
                                   final_lr_fraction=meta["config"].get("final_lr_fraction", 0.0),
                                   probe=curve_probe(meta)))
    if not frames:
        raise UserError(f"no emergence curves in {results_dir}; produce them with  python -m studies.emergence --all")
    return pd.concat(frames, ignore_index=True)


def seed_spread(curves: pd.DataFrame, column: str = "r") -> pd.DataFrame:
    """Per (configuration, tokens): how many seed pairs, their mean r (or another `column`, e.g. the partial
    r), its spread (SD, min, max), the tower family and the mean order-free strength |r_physical| (see
    `curve`). One pair: SD is NaN, min = max = its r."""
    if "pair" not in curves:
        curves = curves.assign(pair="")
    if "model_type" not in curves:
        curves = curves.assign(model_type="")
    cols = {"pairs": ("pair", "nunique"), "model_type": ("model_type", "first"), "r": (column, "mean"),
            "r_sd": (column, "std"), "r_min": (column, "min"), "r_max": (column, "max")}
    if "r_physical" in curves:
        curves = curves.assign(abs_r_physical=curves["r_physical"].abs())
        cols["mean |r_physical|"] = ("abs_r_physical", "mean")
    return curves.groupby(["config", "tokens"], sort=False).agg(**cols).reset_index()


def measured(curves: pd.DataFrame, names: list[str]) -> list[str]:
    """Those of `names` that have a curve, in order: a book table names the configurations it compares,
    and shows what a results directory holds of them."""
    have = set(curves["config"])
    return [n for n in names if n in have]


def _per_config(curves: pd.DataFrame, configs: list[str] | None) -> list[tuple[str, pd.DataFrame]]:
    """(name, its rows) for each of `configs` in that order (None: every configuration); a clear error
    for a name with no curve."""
    out = []
    for config in configs or list(dict.fromkeys(curves["config"])):
        g = curves[curves["config"] == config]
        if g.empty:
            raise UserError(f"no curve of configuration {config!r}; have {sorted(curves['config'].unique())}")
        out.append((config, g))
    return out


def run_ends(curves: pd.DataFrame, configs: list[str] | None = None) -> pd.DataFrame:
    """Per configuration (or `configs`, in that order): its schedule and what its runs reached at their end,
    the mean over seed pairs of r (with SD and range), of the runs' validation loss and of the
    validation-text ceiling (NaN for curves written before it was measured)."""
    rows = []
    for config, g in _per_config(curves, configs):
        end = g[g["tokens"] == g["tokens"].max()]
        loss = pd.concat([end["val_loss_a"], end["val_loss_b"]])
        rows.append({"config": config, "peak lr": g["lr"].iloc[0], "final lr / peak": g["final_lr_fraction"].iloc[0],
                     "tokens": int(end["tokens"].iloc[0]), "seed pairs": end["pair"].nunique(),
                     "r": end["r"].mean(), "r_sd": end["r"].std(), "r_min": end["r"].min(), "r_max": end["r"].max(),
                     "val loss": loss.mean(),
                     "ceiling": end["ceiling"].mean()})
    return pd.DataFrame(rows).set_index("config")


def gap_points(curves: pd.DataFrame) -> pd.DataFrame:
    """Every trained point of every pair with |r| and the smaller of the two runs' tower gaps
    (`margin_a`, `margin_b`: Eq. 3's relative gap in mean p between primary and secondary tower)."""
    g = curves[(curves["tokens"] > 0)].dropna(subset=["margin_a", "margin_b", "r"])
    return g.assign(smaller_gap=g[["margin_a", "margin_b"]].min(axis=1), abs_r=g["r"].abs())[
        ["config", "pair", "tokens", "model_type", "r", "abs_r", "smaller_gap"]].reset_index(drop=True)


def margin_relation(curves: pd.DataFrame) -> pd.DataFrame:
    """Per model type: the correlation of |r| with the smaller tower gap over `gap_points`.

    Why: a run whose towers are nearly equally good has barely split the vocabulary between them,
    and it cannot agree with another run on a split it has not made. Points of one configuration
    share runs, so they are not independent: read the correlation as a description, not a test."""
    g = gap_points(curves)
    rows = []
    for model_type, m in g.groupby("model_type"):
        rows.append({"model type": model_type, "points": len(m), "configurations": m["config"].nunique(),
                     "corr(|r|, smaller gap)": m["abs_r"].corr(m["smaller_gap"]) if len(m) > 2 else np.nan,
                     "smaller gap, median": m["smaller_gap"].median()})
    return pd.DataFrame(rows).set_index("model type")


def study_table(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: what was varied and how far it was trained."""
    g = curves.groupby("config")
    return pd.DataFrame({"model type": g["model_type"].first(), "size preset": g["preset"].first(),
                         "vocabulary": g["vocab_size"].first(), "peak lr": g["lr"].first(),
                         "final lr / peak": g["final_lr_fraction"].first(), "top N": g["top_n"].first(),
                         "seed pairs": g["pair"].nunique(), "snapshots": g["tokens"].nunique(),
                         "tokens trained": g["tokens"].max(), "probe": g["probe"].first()})


def probes_used(curves: pd.DataFrame) -> str:
    """Which probe measured which configurations, in words (the book says it before any curve is read)."""
    groups = curves.groupby("probe", sort=False)["config"].unique()
    if len(groups) == 1:
        return f"probe {groups.index[0]} for every configuration"
    sizes = groups.map(len).sort_values(ascending=False, kind="stable")
    most = sizes.index[0] if sizes.iloc[0] > max(1, sizes.iloc[1]) else None  # a clear majority is not listed
    named = [f"probe {probe} for {', '.join(f'`{c}`' for c in groups[probe])}" for probe in groups.index if probe != most]
    return "; ".join(named) + (f"; probe {most} for every other configuration" if most else "")


def _earlier_and_current(config: str, results_dir: str | Path,
                         earlier_dir: str | Path) -> list[tuple[str, dict, pd.DataFrame]] | None:
    """(label, metadata, curve) of the kept earlier curve and the current one; None if no earlier curve is kept."""
    if not (Path(earlier_dir) / f"{config}.parquet").exists():
        return None
    return [(label, read_json(Path(d) / f"{config}.json"), load_curves(Path(d), [config]))
            for label, d in (("earlier", earlier_dir), ("current", results_dir))]


def probe_comparison(config: str, results_dir: str | Path = RESULTS_DIR,
                     earlier_dir: str | Path = EARLIER_DIR) -> pd.DataFrame:
    """A configuration measured with two probes: per seed pair at the runs' end, r under the earlier curve's
    probe and under the current one's (both score variants where recorded), |r_physical| and the
    validation-text ceiling; two last rows hold the mean and SD over the pairs (which share runs: a
    description, not independent draws). Empty if no earlier curve is kept (`probe_comparison_note` names
    the two probes and data)."""
    both = _earlier_and_current(config, results_dir, earlier_dir)
    if both is None:
        return pd.DataFrame()
    frames = []
    for label, _, c in both:
        end = c[c["tokens"] == c["tokens"].max()].set_index("pair")
        frames.append(pd.DataFrame({f"r ({label})": end["r"], f"r mean log p ({label})": end["r_mean_log"],
                                    f"|r_physical| ({label})": end["r_physical"].abs(),
                                    f"ceiling ({label})": end["ceiling"]}))
    table = pd.concat(frames, axis=1).dropna(axis=1, how="all")  # a variant the earlier curve did not record
    return pd.concat([table, pd.DataFrame([table.mean(), table.std()], index=["mean over pairs", "SD over pairs"])])


def probe_comparison_note(config: str, results_dir: str | Path = RESULTS_DIR, earlier_dir: str | Path = EARLIER_DIR) -> str:
    """Which probes and which prepared data the two curves of `probe_comparison` used, in one sentence."""
    both = _earlier_and_current(config, results_dir, earlier_dir)
    if both is None:
        return f"*`{config}` has not been measured with a second probe.*"
    parts = [f"{label}: probe {curve_probe(meta)}, data {meta['data']['data_hash'][:12]}, written "
             f"{meta['provenance'].get('created', '?')[:10]}" for label, meta, _ in both]
    same = len({meta["data"]["data_hash"] for _, meta, _ in both}) == 1
    events = {meta["probe_config"].get("bert_events", "corrupt") for _, meta, _ in both}  # before: 80/10/10
    bert = both[0][1]["config"]["model_type"] == "bert"
    return (f"`{config}` measured twice ({'; '.join(parts)}). "
            + ("Same prepared data: the runs are the same seeds retrained, so a difference is the probe's, up to "
               "what retraining changes." if same else
               "The corpus was prepared again between the two (another data hash): the runs differ in their "
               "training text as well as in the probe, so the comparison does not isolate the probe.")
            + (" The two scored BERT at different events (the training corruption, where 10% of the scored "
               "tokens are visible, against [MASK] at every scored position), so their validation losses are "
               "not comparable." if bert and len(events) > 1 else ""))


def probe_comparison_along(config: str, results_dir: str | Path = RESULTS_DIR,
                           earlier_dir: str | Path = EARLIER_DIR) -> pd.DataFrame:
    """`probe_comparison` along training: per seed pair and snapshot of either curve, r under the earlier and
    the current probe (NaN where that curve has no such snapshot), the current curve's mean-of-log r and its
    runs' smaller tower gap (Eq. 3's relative gap in mean p: near 0, the primary tower is a coin flip).
    Why: a sign that flips along training shows here, and not at the end alone. Empty if no earlier curve."""
    both = _earlier_and_current(config, results_dir, earlier_dir)
    if both is None:
        return pd.DataFrame()
    (_, _, old), (_, _, new) = both
    keep = ["pair", "tokens", "r"]
    current = new.assign(**{"smaller tower gap": new[["margin_a", "margin_b"]].min(axis=1)})
    table = old[keep].merge(current[keep + ["r_mean_log", "smaller tower gap"]], on=["pair", "tokens"], how="outer",
                            suffixes=(" (earlier)", " (current)"))
    return (table.rename(columns={"r_mean_log": "r mean log p (current)"})
            .sort_values(["pair", "tokens"]).set_index(["pair", "tokens"]))


def size_table(curves: pd.DataFrame, configs: list[str] | None = None,
               at: tuple[int, ...] = (1_000_000, 2_000_000, 4_000_000), tolerance: float = 0.1) -> pd.DataFrame:
    """Per configuration (or `configs`, in that order): its size and vocabulary, and the mean r over its seed
    pairs at the snapshot nearest each budget in `at` (NaN where none lies within `tolerance`, relative).

    Why: the curves' snapshots fall at powers of two and runs end at their budget, so configurations
    are compared at (about) the same tokens seen. The order-free strength mean |r_physical| at the
    last budget reached is given too, since Eq. 3 can flip r's sign (see `curve`). A point inside a
    longer run was taken before its learning rate decayed ("tokens trained" says which)."""
    from twotower_lib.models.config import preset

    spread = seed_spread(curves)
    rows = []
    for config, g in _per_config(curves, configs):
        size = preset(g["preset"].iloc[0], g["model_type"].iloc[0])
        s = spread[spread["config"] == config]
        row = {"config": config, "model type": g["model_type"].iloc[0], "layers": size.n_layer,
               "width per tower": size.hidden, "vocabulary": int(g["vocab_size"].iloc[0]),
               "seed pairs": int(g["pair"].nunique()), "tokens trained": int(g["tokens"].max())}
        last = None
        for target in at:
            near = s[(s["tokens"] - target).abs() <= tolerance * target]
            hit = near.loc[(near["tokens"] - target).abs().idxmin()] if len(near) else None
            row[f"r at {tokens_label(target)}"] = hit["r"] if hit is not None else np.nan
            last = hit if hit is not None else last
        row["|r_physical| at the last of these"] = last["mean |r_physical|"] if last is not None else np.nan
        rows.append(row)
    return pd.DataFrame(rows).set_index("config")


def training_speed(results_dir: str | Path = RESULTS_DIR) -> pd.Series:
    """Per configuration: the fastest measured training speed of its runs, tokens/s (from the curve
    manifests; the fastest, because runs that shared the machine with other work ran slower)."""
    speeds = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        if not path.with_suffix(".parquet").is_file():    # a curve's manifest, not the book's parts
            continue
        meta = read_json(path)
        minutes = [m for m in meta.get("train_minutes", []) if m > 0]
        if minutes:
            speeds[path.stem] = meta["config"]["train_tokens"] / (60 * min(minutes))
    return pd.Series(speeds, name="train tokens/s", dtype=float)




def result_box(curves: pd.DataFrame, paper: float = SAME_CONFIG_R) -> str:
    """The chapter's result box: per configuration with several seed pairs, the end of training as a
    distribution over pairs of the order-free |r| (median and central range, `paper.CENTRAL`), the signed r's
    median beside (its sign is Eq. 3's orientation), the untrained point of the same pairs as the control, and
    the verdict by the scorecard's rule (`seed_spread.verdict`, on |r|) against the paper's r at the end of its
    training. Only today's probe is judged, and its configurations come first: an earlier probe's curves are
    shown as measured, with no verdict, since their heads had not converged (the chapter's caveat)."""
    from twotower_lib.analysis.seed_spread import summarize, verdict
    from twotower_lib.paper import CENTRAL

    lines = [f"| configuration | probe | tokens | pairs | \\|r\\|: median [{CENTRAL[0]:.0%}–{CENTRAL[1]:.0%}] | signed r: "
             f"median | untrained \\|r\\|, highest | the paper | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for config, g in sorted(_per_config(curves, None), key=lambda c: c[1]["probe"].iloc[0] != CURRENT_PROBE):
        end = g[g["tokens"] == g["tokens"].max()]
        if end["pair"].nunique() < 2:
            continue
        control = g.loc[g["tokens"] == 0, "r"]
        s = summarize(end["r"].abs())
        seed_a, seed_b = zip(*(seed_pair(p) for p in end["pair"]))
        verdict_text = ("not judged: an earlier probe" if g["probe"].iloc[0] != CURRENT_PROBE
                        else f"**{verdict(seed_a, seed_b, end['r'], control, paper) if len(control) else 'not attempted'}**")
        control_text = f"{control.abs().max():.2f}" if len(control) else "—"
        lines.append(f"| `{config}` | {g['probe'].iloc[0]} | {tokens_label(int(end['tokens'].iloc[0]))} | {s['n']} | "
                     f"{s['median']:.2f} [{s['low']:.2f}, {s['high']:.2f}] | {number(end['r'].median())} | "
                     f"{control_text} | {paper} | {verdict_text} |")
    return full_width("\n".join(lines))   # nine columns: read whole across the page's margin


def summary(curves: pd.DataFrame) -> str:
    """The chapter's closing summary in sentences, every number from the curves: each multi-seed configuration's
    end-of-training median |r| measured with the current probe (the statistic its verdict judges), how widely its
    pairs spread, its signed median beside, and the seeds' share of the answer."""
    from twotower_lib.analysis.seed_spread import summarize

    current = curves[~curves["probe"].str.startswith("earliest")]
    rows = []
    for config, g in _per_config(current if len(current) else curves, None):
        end = g[g["tokens"] == g["tokens"].max()]
        if end["pair"].nunique() >= 2:
            s = summarize(end["r"])
            rows.append((config, s, summarize(end["r"].abs()), tokens_label(int(end["tokens"].iloc[0])),
                         bool((end["r"] > 0).any() and (end["r"] < 0).any())))
    if not rows:
        return "No configuration here has several seed pairs, so no curve gives a spread over seeds."
    parts = [f"`{c}` ends at a median |r| of {a['median']:.2f} over {s['n']} seed pairs after {t} tokens "
             f"(pairs from {a['min']:.2f} to {a['max']:.2f}; signed median {number(s['median'])})" for c, s, a, t, _ in rows]
    text = ("With the current probe, " + "; ".join(parts) + f". The paper's two Bert-large runs agree at "
            f"r = {SAME_CONFIG_R} after a day on six GPUs.")
    if any(mixed for *_, mixed in rows):
        text += (" The runs share a division of the vocabulary more often than its sign: which tower ends up the "
                 "better one differs between seeds, so a single pair's r is one draw from a wide distribution.")
    return text


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
    rows, end = _snapshot(curves, config), run_ends(curves, [config]).loc[config]
    gaps = _gaps(rows)
    return {f"{prefix}_pairs": str(int(end["seed pairs"])), f"{prefix}_mean": _n(end["r"]), f"{prefix}_sd": _n(end["r_sd"]),
            f"{prefix}_min": _n(end["r_min"]), f"{prefix}_max": _n(end["r_max"]),
            f"{prefix}_positive": str(int((rows["r"] > 0).sum())), f"{prefix}_loss": _n(end["val loss"]),
            f"{prefix}_abs_min": _n(rows["r"].abs().min()), f"{prefix}_abs_max": _n(rows["r"].abs().max()),
            f"{prefix}_tokens": tokens_label(end["tokens"]),
            f"{prefix}_gap_min": _pct(gaps.min()), f"{prefix}_gap_max": _pct(gaps.max())}


def _one(key: str, rows: pd.DataFrame) -> dict[str, str]:
    """A one-pair snapshot: r, |r|, its 95% interval (resampling validation documents), the towers' gaps, and
    where the curve records them r under the mean of log p and the validation-text ceiling."""
    row, gaps = rows.iloc[0], _gaps(rows)
    return {key: _n(row["r"]), f"{key}_abs": _n(abs(row["r"])), f"{key}_at": tokens_label(row["tokens"]), f"{key}_ci": f"[{_n(row['ci_low'])}, {_n(row['ci_high'])}]",
            f"{key}_gap_min": _pct(gaps.min()), f"{key}_gap_max": _pct(gaps.max()),
            f"{key}_mean_log": _n(row["r_mean_log"]) if pd.notna(row["r_mean_log"]) else "not recorded",
            f"{key}_ceiling": _n(row["ceiling"]) if pd.notna(row["ceiling"]) else "not measured"}


def numbers(curves: pd.DataFrame) -> dict[str, str]:
    """The `{{ key }}` numbers of the decisions page that come from the curves: the profiles' choices rest on them."""
    out: dict[str, str] = {}
    earlier = load_curves(EARLIER_DIR) if any(EARLIER_DIR.glob("*.parquet")) else curves.iloc[:0]
    for prefix, config in (("bert_small", "bert-cpu-small-v8192"), ("bert_small_const", "bert-cpu-small-v8192-4M-const"),
                           ("bert_large_const", "bert-cpu-v8192-2M-const"), ("gpt_1m", "gpt-cpu-v8192-1M"),
                           ("gpt_1m_lr3", "gpt-cpu-v8192-1M-lr3e-3"), ("gpt_1m_const", "gpt-cpu-v8192-1M-const"),
                           ("gpt_2m", "gpt-cpu-v8192-2M-4seeds")):
        out.update(_pairs(prefix, curves, config))
        if config in curves["config"].values:        # which probe measured them, printed beside them
            out[f"{prefix}_probe"] = curves.loc[curves["config"] == config, "probe"].iloc[0]
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
    relation = margin_relation(curves)["corr(|r|, smaller gap)"]
    out.update(gap_corr_gpt=_n(relation["gpt"]), gap_corr_bert=_n(relation["bert"]))
    speed = training_speed()
    out.update(gpt_speed=f"{speed['gpt-cpu-v8192']:,.0f}", bert_speed=f"{speed['bert-cpu-v8192']:,.0f}",
               elmo_speed=f"{speed['elmo-cpu-v8192']:,.0f}",
               bert_over_gpt=f"{speed['bert-cpu-v8192'] / speed['gpt-cpu-v8192']:.1f}")
    out["study_probe"] = probes_used(curves)
    if "gpt-cpu-v8192-2M-4seeds" in earlier["config"].values:   # the same seeds with the earlier probe
        out.update(_pairs("gpt_2m_earlier", earlier, "gpt-cpu-v8192-2M-4seeds"))
    for key, config in (("gpt_2m", "gpt-cpu-v8192-2M-4seeds"), ("bert_base_16M", "bert-cpu-small-v8192-16M")):
        out[f"{key}_probe"] = curves.loc[curves["config"] == config, "probe"].iloc[0]
        if config in earlier["config"].values:
            out[f"{key}_earlier_probe"] = earlier.loc[earlier["config"] == config, "probe"].iloc[0]
    return out


# What section 07 shows beyond its result: the probe comparisons, and the configurations compared by size
# and by schedule.
COMPARED = "gpt-cpu-v8192-2M-4seeds"
ALONG = ("bert-cpu-small-v8192-16M", "bert-cpu-small-v8192-16M-s3s4")
SIZES = ("bert-cpu-v8192", "bert-cpu-small-v8192", "bert-cpu-wide-v8192", "bert-cpu-deep-v8192", "bert-cpu-v4096",
         "gpt-cpu-v8192", "elmo-cpu-v8192")
SCHEDULES = ("gpt-cpu-v8192-1M", "gpt-cpu-v8192-1M-lr3e-3", "gpt-cpu-v8192-1M-const")
BERT_SCHEDULES = ("bert-cpu-small-v8192", "bert-cpu-small-v8192-4M-const", "bert-cpu-v8192-2M-const")


def book_parts(curves: pd.DataFrame) -> dict[str, str]:
    """Section 07's parts, by name: Markdown (`*_TEXT`, `RESULT`, `SUMMARY`), reader tables as HTML (`*_TABLE`)
    and charts as Vega-Lite JSON (`*_CHART`)."""
    from studies.emergence import charts
    from twotower_lib.book.tables import reader_html

    spread = seed_spread(curves)
    current = curves["probe"] == CURRENT_PROBE   # today's probe on one chart; the earlier probe's curves on another
    chart = lambda rows, title: charts.curve_with_band(
        seed_spread(rows[rows["tokens"] > 0]), "tokens", "r", "r_min", "r_max", "config", title=title,
        x_title="tokens seen (log scale)", y_title="Pearson r", log_x=True, panel="model_type",
        reference=(SAME_CONFIG_R, "the paper, Bert-large run 1 vs run 2")).to_json() if rows["tokens"].gt(0).any() else ""
    along = "".join(f"<p>{probe_comparison_note(c)}</p>" + reader_html(probe_comparison_along(c)) for c in ALONG)
    return {
        "EMERGENCE_RESULT": result_box(curves) + "\n" + paper.RULE,
        "EMERGENCE_CHART": chart(curves[current], f"Same configuration, different seeds, probe {CURRENT_PROBE}: mean r "
                                                  "over seed pairs and their range"),
        "EMERGENCE_EARLIER_CHART": chart(curves[~current], "Measured with an earlier probe (not comparable with the "
                                                           "chart above: its values run higher)"),
        "EMERGENCE_PROBES_TEXT": "Measured with " + probes_used(curves) + ".",
        "EMERGENCE_STUDY_TABLE": reader_html(study_table(curves)),
        "EMERGENCE_GAP_CHART": charts.gap_scatter(gap_points(curves)).to_json(),
        "EMERGENCE_MARGIN_TABLE": reader_html(margin_relation(curves)),
        "EMERGENCE_SPREAD_TABLE": reader_html(spread[spread["pairs"] > 1]),
        "EMERGENCE_COMPARED_TABLE": f"<p>{probe_comparison_note(COMPARED)}</p>" + reader_html(probe_comparison(COMPARED)),
        "EMERGENCE_ALONG_TABLE": along,
        "EMERGENCE_SIZES_TABLE": reader_html(size_table(curves, measured(curves, list(SIZES)))),
        "EMERGENCE_SCHEDULES_TABLE": reader_html(run_ends(curves, measured(curves, list(SCHEDULES)))),
        "EMERGENCE_BERT_SCHEDULES_TABLE": reader_html(run_ends(curves, measured(curves, list(BERT_SCHEDULES)))),
        "EMERGENCE_SUMMARY": summary(curves)}


def write_book(results_dir: Path = RESULTS_DIR) -> Path:
    """Section 07's parts and the decisions page's numbers into `results/emergence/book.json`, from the
    committed curves (and the earlier probe's, kept beside them)."""
    from twotower_lib.book import study_parts

    curves = load_curves(results_dir)
    inputs = sorted(Path(results_dir).glob("*.parquet")) + sorted(Path(results_dir).glob("*.json"))
    inputs += sorted((Path(results_dir) / "earlier-probe").glob("*"))
    return study_parts.write(Path(results_dir), book_parts(curves), numbers(curves),
                             [p for p in inputs if p.name != study_parts.FILE], "python -m studies.emergence book")
