"""The paper's text against the authors' released code: the book page "The paper, its code, and this
companion".

`DIFFERENCES` lists every place where the released code (hezq06/twotower_lm, and the ICA of
hezq06/ncautil) does something other than the paper says: what each side does, a link to the line at
a pinned commit, what this library does by default (the text, wherever the two disagree), and the
option that gives the other side. What each difference changes (every pair's r in both score
variants with its bootstrap interval, and both tower-order rules for every run) is measured by
`studies.released.runner`, which writes results/released/<profile>.json with its provenance;
`to_markdown` renders the page's table from it and `write_book` puts the page's parts into
results/released/book.json, which the book reads, so no number on the page is typed by hand.

    python -m studies.released book
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from twotower_lib.book.paper_tables import interval
from twotower_lib.artifacts import read_json
from studies.probe.report import DEFAULT_RECIPE, RECIPES
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.book.tables import full_width, markdown_table
from twotower_lib.probe.config import measured_with
from twotower_lib.run_names import model_of

CODE = ("hezq06/twotower_lm", "e8b468e1a224e5848389f79a1070f5c0dc9bbb33")
ICA_CODE = ("hezq06/ncautil", "8c5be0c3ce0c4f2592da3553378e92d9532f5111")
RESULTS = PROJECT_ROOT / "results" / "released"
VARIANT_NAMES = {"score": "Eq. 4", "score_logmean": "mean log p"}


def code_link(path: str, line: int, repo: tuple[str, str] = CODE) -> str:
    """A Markdown link to one line of the released code at its pinned commit."""
    name, commit = repo
    return f"[{path.rsplit('/', 1)[-1]} L{line}](https://github.com/{name}/blob/{commit}/{path}#L{line})"


@dataclass(frozen=True)
class Difference:
    topic: str
    paper: str                                  # what the paper's text says (or leaves unsaid)
    released: str                               # what the released code does
    where: tuple[tuple[str, int, tuple[str, str]], ...]   # (path, line, repo) of the code that does it
    here: str                                   # this library's default
    option: str                                 # how to get the released side here
    effect: str = ""                            # which measured effect (`effects`) answers it; "" = not measured


DIFFERENCES: tuple[Difference, ...] = (
    Difference("ELMo backward direction",
               "a forward and a backward LSTM per tower, the input shifted by one each way",
               "the backward outputs are 'flipped' with einsum('bwl,ww->bwl', t, flip(eye(W))): a repeated index "
               "takes the anti-identity's diagonal, all zeros at W = 128, so every backward output is 0 and both "
               "towers are left-to-right LSTM language models",
               (("ttlm/model.py", 591, CODE),),
               "bidirectional, as the text says", "`elmo_backward_zeroed`; model `elmo-released`, `train --as-released`",
               "elmo"),
    Difference("ELMo module shapes",
               "Table 1: 2 layers, hidden size 4096",
               "an embedding 2 x 256 wide, one 512 -> 256 map per tower shared by both directions, a LayerNorm per "
               "direction; LSTM state 4096",
               (("ttlm/model.py", 510, CODE), ("ttlm/model.py", 512, CODE)),
               "a k x H embedding, H per tower, one LayerNorm", "`layout='released'` (part of `elmo-released`)",
               "elmo-shapes"),
    Difference("GPT towers",
               "Table 1: 12 layers, hidden 768, intermediate 3072",
               "two Hugging Face GPT2LMHeadModels of width 384 (inner 1536) sharing one 384-wide token and position "
               "embedding, no embedding LayerNorm, no per-tower projection (768 / 3072 may be the two towers together)",
               (("ttlm/model.py", 746, CODE), ("ttlm/model.py", 749, CODE)),
               "768 / 3072 per tower on a k x H embedding with a per-tower projection",
               "`layout='released'`, presets `released-gpt`; model `gpt-released`", "gpt"),
    Difference("BERT layers",
               "DeepSpeed's Bing-BERT transformer kernel",
               "the kernel with pre_layer_norm=True and no final LayerNorm per tower; Bert-base intermediate 1536 "
               "(Table 1: 1024)",
               (("ttlm/model.py", 132, CODE), ("ttlm/model.py", 270, CODE)),
               "Hugging Face post-LN layers (the kernel on CUDA with `deepspeed_kernel`, plus a final LayerNorm)",
               "`layout='released'` (pre-LN, no final LayerNorm); models `bert-base-released`, `bert-large-released`"),
    Difference("Probe recipe",
               "a probing head per tower on the frozen model (Eq. 2)",
               "untied heads on each tower's slice of the joint LayerNorm, trained with the model in train mode "
               "(dropout on), fresh masks every epoch, 3,000 steps at rate 1e-3 with 1,000 warm-up steps and "
               "linear decay",
               (("ttlm/dslearn.py", 273, CODE), ("workspace/TwoTowerLM.py", 60, CODE)),
               "linear heads (Eq. 2) on the joint LayerNorm's slice, trained to a held-out plateau, then a "
               "cool-down whose iterates are averaged; BERT at [MASK]",
               "`ProbeConfig.as_released()`, `probe --as-released`", "probe"),
    Difference("Preference score and tower order",
               "Eq. 4: the log of the mean probability; Eq. 3 orders the towers by mean probability",
               "the mean of the log-probabilities, 0 for tokens never seen; no ordering rule in the code",
               (("ttlm/model.py", 491, CODE), ("ttlm/model.py", 494, CODE)),
               "Eq. 4 and Eq. 3; the mean of log p shown beside it, and the order by mean log p flagged where it differs",
               "the `score_logmean` column of every preference table", "order"),
    Difference("Data format",
               "BookCorpus and Wikipedia",
               "[CLS] A [SEP] B [SEP] blocks with padding, the bert-base-uncased vocabulary; GPT and ELMo losses "
               "also count [PAD], [CLS] and [SEP]",
               (("ttlm/datautil.py", 209, CODE), ("ttlm/datautil.py", 336, CODE)),
               "a WordPiece vocabulary learned on the corpus, documents joined by [SEP], no padding; "
               "special tokens never scored", "none"),
    Difference("ICA",
               "PCA then Amari's ICA (Eq. 5-6)",
               "PCA whitens the uncentred data; the Amari update rescales W every step so that |W|_F = |I|_F",
               (("ncamath.py", 81, ICA_CODE), ("ncamath.py", 271, ICA_CODE)),
               "centred whitening, the natural-gradient update with no rescaling",
               "`PCAConfig(center=False)`; the rescaling: none"),
)


# ---------------------------------------------------------------------- measuring


def pair_r(found: dict, a: str, b: str, variant: str = "score") -> dict | None:
    """The row of pair (a, b) in either order, or None."""
    for row in found["pairs"]:
        if row["variant"] == variant and {row["a"], row["b"]} == {a, b}:
            return row
    return None


def _fmt(row: dict | None) -> str:
    if row is None:
        return "not measured"
    ci = f" {interval(row['r'], row['ci_low'], row['ci_high'], '{:+.2f}')}" if "ci_low" in row else ""
    return f"{row['r']:+.2f}{ci}"


def _family(found: dict, model: str) -> list[str]:
    """Cases of one model ("gpt" gives gpt-s1, gpt-s2; not gpt-released-s1)."""
    return [r["case"] for r in found["ordering"] if model_of(r["case"]) == model]


def cross_mean(found: dict, left: list[str], right: list[str], variant: str = "score") -> tuple[float, int, float, float] | None:
    """Mean r over every pair of one case of `left` with one of `right`, the number of pairs, and the
    lowest and highest r among them (the spread over seeds)."""
    rs = [row["r"] for a in left for b in right if (row := pair_r(found, a, b, variant))]
    return (mean(rs), len(rs), min(rs), max(rs)) if rs else None


def effects(found: dict, recipes: dict | None = None) -> dict[str, str]:
    """What each measured difference changes, one sentence per `Difference.effect` key."""
    out = {}
    elmo, released = _family(found, "elmo"), _family(found, "elmo-released")
    if elmo or released:
        parts = []
        for label, runs in (("bidirectional", elmo), ("as released", released)):
            if len(runs) >= 2:
                parts.append(f"{label} ELMo pair r = {_fmt(pair_r(found, runs[0], runs[1]))} "
                             f"(mean log p {_fmt(pair_r(found, runs[0], runs[1], 'score_logmean'))})")
        for other in ("gpt", "gpt-released", "bert-base", "bert-large"):
            cells = []
            for label, runs in (("bidirectional", elmo), ("as released", released)):
                m = cross_mean(found, runs, _family(found, other))
                if m:
                    spread = f", {m[2]:+.2f} to {m[3]:+.2f}" if m[1] > 1 else ""
                    cells.append(f"{m[0]:+.2f} {label} ({m[1]} pairs{spread})")
            if cells:
                parts.append(f"ELMo-{other}: mean r " + " vs ".join(cells))
        out["elmo"] = "; ".join(parts)
        out["elmo-shapes"] = "measured together with the backward direction (the released ELMo has both): the row above"

    def quality(runs: list[str]) -> str:
        rows = [r for r in found["ordering"] if r["case"] in runs and "validation loss" in r]
        if not rows:
            return ""
        losses = ", ".join(f"{r['validation loss']:.2f}" for r in rows)
        reliability = ", ".join(f"{r['probe reliability (Eq. 4)']:.2f}" for r in rows)
        return f" [validation loss {losses}; probe-seed reliability {reliability}]"

    if "elmo" in out:
        out["elmo"] += "; " + "; ".join(f"{label}{quality(runs)}" for label, runs in
                                         (("bidirectional", elmo), ("as released", released)) if quality(runs))
    gpt, gpt_released = _family(found, "gpt"), _family(found, "gpt-released")
    if len(gpt) >= 2 or len(gpt_released) >= 2:
        out["gpt"] = "; ".join(f"{label} GPT pair r = {_fmt(pair_r(found, runs[0], runs[1]))} "
                               f"(mean log p {_fmt(pair_r(found, runs[0], runs[1], 'score_logmean'))}){quality(runs)}"
                               for label, runs in (("as here", gpt), ("as released", gpt_released)) if len(runs) >= 2)
    disagree = [r["case"] for r in found["ordering"] if not r["rules agree"]]
    out["order"] = (f"the two tower-order rules disagree on {len(disagree)} of {len(found['ordering'])} runs"
                    + (f" ({', '.join(disagree)}: every r these enter flips sign with the rule)" if disagree else ""))
    if recipes:
        rows = {(r["run"], r["recipe"]): r for r in recipes["runs"]}
        cells = []
        for recipe in (DEFAULT_RECIPE, "as released"):
            single = [r for (run, rec), r in rows.items() if rec == recipe and r.get("towers") == 1]
            rel = [r["reliability_score"] for (run, rec), r in rows.items() if rec == recipe and "reliability_score" in r
                   and r["reliability_score"] == r["reliability_score"]]
            if single or rel:
                text = f"{recipe}: "
                text += f"shortfall {single[0]['head_minus_cooperative']:+.3f} nats" if single else "shortfall not measured"
                text += f", probe-seed reliability {min(rel):.2f}-{max(rel):.2f}" if rel else ""
                pairs = [p for p in recipes.get("pairs", []) if p["recipe"] == recipe]
                text += "".join(f", {p['a']} vs {p['b']} r = {p['r_score']:+.2f} (mean log p {p['r_score_logmean']:+.2f})"
                                for p in pairs)
                cells.append(text)
        if cells:
            out["probe"] = "; ".join(cells)
    return out


def elmo_sentence(found: dict | None) -> str:
    """The introduction's measured ELMo sentence (empty when not measured)."""
    text = effects(found).get("elmo") if found else None
    if not text:
        return ""
    return (f"Measured at the `{found['profile']}` profile (top {found['top_n']} tokens, 95% intervals resampling "
            f"validation documents; each range spans the seed pairs): {text}.\n")


def load(profile: str = "cpu", path: Path | None = None) -> dict | None:
    """The committed measurement of `profile`, or None when it was not measured."""
    path = path or RESULTS / f"{profile}.json"
    return read_json(path) if path.exists() else None


def load_recipes() -> dict | None:
    """The committed probe-recipe comparison (`studies/probe/compare_recipes.py`), or None."""

    return read_json(RECIPES) if RECIPES.exists() else None


def to_markdown(found: dict | None, recipes: dict | None = None) -> str:
    """The page's table: one row per difference, the measured effect where there is one, across the page's margin."""
    measured = effects(found, recipes) if found else {}
    rows = [[d.topic, d.paper, d.released, ", ".join(code_link(path, line, repo) for path, line, repo in d.where),
             d.here, d.option, measured.get(d.effect, "not measured") if d.effect else "not measured"]
            for d in DIFFERENCES]
    table = markdown_table(["Difference", "The paper", "The released code", "Where", "This library (default)",
                            "The released side here", "Measured here"], rows)
    note = ("" if found else "\n*Not measured yet at this profile: "
            "`python -m studies.released --profile cpu` writes results/released/cpu.json.*\n")
    older = measured_with(found.get("probe_version"), found.get("probe_precondition")) if found else None
    if older:
        note += (f"\n*{older[:1].upper()}{older[1:]} (section 02). `{found.get('command', 'python -m studies.released')}` "
                 "re-measures it on a pipeline run probed with the current version.*\n")
    return full_width(table) + note       # seven columns of prose: across the page's margin


def write_book(profile: str = "cpu") -> Path:
    """The page's table and the introduction's ELMo sentence into `results/released/book.json`."""
    from twotower_lib.book import study_parts

    found, recipes = load(profile), load_recipes()
    parts = {"RELEASED": to_markdown(found, recipes), "RELEASED_ELMO": elmo_sentence(found)}
    inputs = [p for p in (RESULTS / f"{profile}.json", RECIPES) if p.is_file()]
    return study_parts.write(RESULTS, parts, {}, inputs, "python -m studies.released book")
