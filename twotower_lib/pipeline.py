"""The book's sections in order, run with papermill, re-run only when something they read changed.

Each section is a jupytext percent-format notebook `notebooks/<name>.py`. `run` converts it in
memory, executes it with papermill and writes the executed copy to
`runs/<profile>/notebooks/<name>.ipynb` (never into a jupytext-paired file, so the source stays
clean). A section re-runs only when its parameters, its source or an upstream section's output
changed; each run leaves a record in `runs/<profile>/.pipeline/<name>.json` saying what it read.

Inside a notebook, `open_section(name, globals())` validates the parameters cell (an unknown
name or a bad value fails at the top), resolves the profile, and checks that the upstream
sections' outputs exist (if not, it names the command that produces them). The helpers after it
(`load_data`, `train_cases`, `probe_cases`, `load_scores`, `correlations`, ...) are how sections
find each other's outputs by configuration, so notebooks never type a path.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from twotower_lib.artifacts import atomic_write_json, provenance, read_json, sha256_file, sha256_json
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name, control_name, independent_pair_name, model_of  # noqa: F401 (notebooks use pipeline.model_of)
from twotower_lib.profiles import DEFAULT_PROFILE, OVERRIDABLE, PROFILES, Profile, get_profile, profile_dir, runs_root

if TYPE_CHECKING:
    import pandas as pd

PROJECT_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"
# Parameters every section notebook has besides the profile fields it reads.
COMMON_PARAMETERS = ("profile", "runs_dir")


@dataclass(frozen=True)
class Section:
    """One chapter of the book: a notebook, the profile fields it reads, the sections it reads from."""

    name: str                          # notebook stem; the number gives the order
    title: str
    output: str                        # its output directory under runs/<profile>/
    parameters: tuple[str, ...]        # profile fields it reads (overridable with -p)
    upstream: tuple[str, ...] = ()     # every section whose output it reads (re-runs when one changes)
    committed: tuple[str, ...] = ()    # committed result folders it reads, relative to the project (re-runs when they change)


SECTIONS: tuple[Section, ...] = (
    Section("00_data", "Data", "data", ("corpus", "vocab_size", "seq_len", "data_seed", "doc_words", "valid_fraction")),
    Section("01_training", "Cooperative training", "training",
            ("cases", "train_tokens", "model_tokens", "model_lr", "model_final_lr", "precision", "micro_batch", "launcher", "num_gpus",
             "controls", "control_models", "threads_per_run"),
            ("00_data",)),
    Section("02_probing", "Probing and preference scores", "probing",
            ("cases", "probe_tokens", "probe_head", "probe_features", "bert_events", "controls", "control_models", "top_n"),
            ("00_data", "01_training"), committed=("results/probe",)),
    Section("03_correlations", "Correlation of preference scores", "correlations",
            ("cases", "top_n", "bootstrap", "controls", "control_models"), ("00_data", "01_training", "02_probing")),
    Section("04_pos", "Part-of-speech preference", "pos", ("cases", "top_n", "pos_docs", "pos_backend"),
            ("00_data", "02_probing")),
    Section("05_ica", "ICA word groups", "ica", ("cases", "ica_reference", "ica_tokens", "ica_dim"),
            ("00_data", "01_training", "02_probing")),
    Section("06_frequency", "Preference and word frequency", "frequency", ("cases", "top_n", "bootstrap"), ("00_data", "02_probing")),
    Section("07_emergence", "When the preference emerges", "emergence", (), ("03_correlations",),
            committed=("results/emergence", "results/profiles")),
)


def find_section(name: str, sections: tuple[Section, ...] = SECTIONS) -> Section:
    for s in sections:
        if s.name == name or s.name.split("_", 1)[1] == name:
            return s
    raise UserError(f"unknown section {name!r}; the sections are: {', '.join(s.name for s in sections)}")


def run_command(section: str, profile: str, overrides: dict[str, Any] | None = None,
                runs_dir: str | Path | None = None) -> str:
    """The shell command that runs `section` (and whatever it needs) at `profile`, into `runs_dir`
    (named only where it is not the default, so the command fixes what it is printed for)."""
    ps = "".join(f" -p {k} {_to_text(v)}" for k, v in (overrides or {}).items())
    where = f" --runs-dir {runs_dir}" if runs_dir and Path(runs_dir).resolve() != runs_root() else ""
    return f"python -m twotower_lib run {section} --profile {profile}{ps}{where}"


def _to_text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)


# ---------------------------------------------------------------------- inside a notebook


@dataclass
class SectionContext:
    """What a running notebook knows: its section, the resolved profile, where outputs go."""

    section: Section
    profile: Profile
    root: Path                                   # runs/<profile>/
    overrides: dict[str, Any] = field(default_factory=dict)
    sections: tuple[Section, ...] = SECTIONS

    @property
    def out(self) -> Path:
        """This section's output directory (created on first use)."""
        d = self.root / self.section.output
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def parameters(self) -> dict[str, Any]:
        """The resolved values of the profile fields this section reads."""
        values = self.profile.values()
        return {k: values[k] for k in self.section.parameters}

    def parameter_table(self):
        """The resolved parameters as a one-column table, headed by the profile (each section shows it)."""
        import pandas as pd

        return pd.DataFrame({"value": {k: str(v) for k, v in self.parameters.items()}}).rename_axis(
            f"profile {self.profile.name}")

    def input_dir(self, upstream: str) -> Path:
        """The output directory of an upstream section; UserError naming the command if it is missing."""
        if upstream not in self.section.upstream:
            raise UserError(f"section {self.section.name} does not declare {upstream} as an input "
                            f"(its inputs: {list(self.section.upstream) or 'none'})")
        up = find_section(upstream, self.sections)
        d = self.root / up.output
        if not (d / "section.json").exists():
            ups = {k: v for k, v in self.overrides.items() if k in up.parameters}
            raise UserError(f"section {self.section.name} needs the output of section {up.name} ({up.title}) "
                            f"at {d}, which has not been produced at profile {self.profile.name!r}. "
                            f"Produce it with:  {run_command(up.name, self.profile.name, ups, self.root.parent)}")
        return d

    def finish(self, **summary: Any) -> Path:
        """Mark the section's output complete; downstream sections look for this file."""
        return atomic_write_json(self.out / "section.json", {
            "section": self.section.name, "profile": self.profile.name,
            "parameters": self.parameters, "summary": summary})


def _notebook_variables(namespace: dict[str, Any]) -> dict[str, Any]:
    """The plain-data variables a notebook defined so far (its parameters), without IPython's own."""
    hidden: set[str] = set()
    ip = namespace.get("get_ipython")
    if callable(ip) and ip() is not None:
        hidden = set(ip().user_ns_hidden)
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and k not in hidden and not isinstance(v, types.ModuleType) and not callable(v)}


def open_section(name: str, namespace: dict[str, Any], sections: tuple[Section, ...] = SECTIONS) -> SectionContext:
    """Validate a notebook's parameters and return its context. Call right after the parameters cell."""
    section = find_section(name, sections)
    params = _notebook_variables(namespace)
    allowed = COMMON_PARAMETERS + section.parameters
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise UserError(f"unknown parameter(s) {unknown} for section {section.name}; its parameters are: "
                        f"{', '.join(allowed)}. Check the spelling of `-p NAME VALUE`.")
    profile = get_profile(params.get("profile") or DEFAULT_PROFILE)
    overrides = {k: v for k, v in params.items() if k in section.parameters and v is not None}
    profile = profile.with_overrides(overrides, where=f"parameter of notebook {section.name}")
    ctx = SectionContext(section, profile, profile_dir(profile.name, params.get("runs_dir")),
                         {k: getattr(profile, k) for k in overrides}, sections)
    for up in section.upstream:
        ctx.input_dir(up)
    return ctx


def section_summary(ctx: SectionContext, upstream: str) -> dict[str, Any]:
    """The summary an upstream section recorded when it finished (its `ctx.finish(...)` keywords)."""
    return read_json(ctx.input_dir(upstream) / "section.json").get("summary", {})


def load_data(ctx: SectionContext):
    """The prepared data of 00_data, for any section that declares it as input."""
    from twotower_lib.data import load_prepared

    return load_prepared(ctx.input_dir("00_data") / "prepared")


# ---------------------------------------------------------------------- what sections share


def training_runs(profile: Profile) -> list[tuple[str, str, int, int]]:
    """(name, model, seed, towers) of every run 01_training trains: the cases, then the control runs."""
    return ([(case_name(m, s), m, s, 2) for m, s in profile.case_list()]
            + [(control_name(m, s), m, s, 1) for m, s in profile.independent_runs()])


# What makes an existing run another run: a change in any of these trains it again from scratch.
RUN_SETUP = ("model", "preset", "seed", "towers", "micro_batch", "grad_accum", "precision", "lr", "final_lr_fraction",
             "deepspeed_config")


def why_retrain(old_config: dict, steps_done: int, tcfg, data_hash: str) -> str | None:
    """Why a run directory written with `old_config` (its config.json) cannot be kept or resumed as
    `tcfg` on the data `data_hash`, or None if it can (a longer budget resumes it)."""
    from twotower_lib.train import TrainConfig

    if old_config["data"]["data_hash"] != data_hash:
        return (f"because the prepared data changed (data hash {old_config['data']['data_hash'][:12]} -> "
                f"{data_hash[:12]})")
    if steps_done > tcfg.max_steps:
        return f"because its budget shrank ({steps_done} steps done, {tcfg.max_steps} asked)"
    changed = {k: (old_config["train"].get(k, getattr(TrainConfig, k, None)), getattr(tcfg, k)) for k in RUN_SETUP}
    changed = {k: v for k, v in changed.items() if v[0] != v[1]}
    if changed:
        return "because its setup changed: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
    return None


def set_aside(run_dir: Path, root: Path) -> Path:
    """Move a run that is about to be trained again to `root/superseded/<section output>/<run>-<UTC time>/`
    instead of deleting it: its weights and curves stay there until the user removes them."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = root / "superseded" / run_dir.parent.name / f"{run_dir.name}-{stamp}"
    n = 1
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{run_dir.name}-{stamp}-{n}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run_dir, dest)
    return dest


def train_cases(ctx: SectionContext, data) -> pd.DataFrame:
    """Train every case (and the independent-pairs control runs) into 01_training's output; one row per run.

    A finished run with the same setup is kept; a longer budget resumes it; a run with another
    setup (model, seed, batch, learning rate, precision or data changed, or a shorter budget) is trained again,
    the old one moved aside (`set_aside`).
    On a CPU the runs go side by side at the profile's `threads_per_run` (`twotower_lib.workers`).
    """
    import pandas as pd

    from twotower_lib.train import train_job
    from twotower_lib.workers import run_jobs

    jobs = []
    for name, model, seed, towers in training_runs(ctx.profile):
        out = ctx.out / name
        tcfg = ctx.profile.train_config(model, seed, data.path, towers=towers)
        if (out / "config.json").exists():
            steps = read_json(out / "manifest.json")["steps"] if (out / "manifest.json").exists() else 0
            reason = why_retrain(read_json(out / "config.json"), steps, tcfg, data.data_hash)
            if reason:
                moved = set_aside(out, ctx.root)
                print(f"{name}: training again from scratch, {reason}; the old run is kept in {moved}")
        if not ((out / "manifest.json").exists() and read_json(out / "manifest.json")["steps"] == tcfg.max_steps):
            if ctx.profile.launcher == "deepspeed":
                _deepspeed_train(ctx, tcfg, out)
            else:
                jobs.append({"tcfg": tcfg, "data_path": str(data.path), "out": str(out)})
    run_jobs(train_job, jobs, ctx.profile.threads_per_run, "training", label=lambda j: Path(j["out"]).name)

    rows = []
    for name, model, seed, towers in training_runs(ctx.profile):
        m = read_json(ctx.out / name / "manifest.json")
        log = training_log(ctx, [name])
        rows.append({"run": name, "model": model, "preset": m["config"]["train"]["preset"], "towers": towers,
                     "seed": seed, "role": "case" if towers == 2 else "control (independent pairs)",
                     "steps": m["steps"], "tokens seen": m["tokens_seen"], "minutes": round(m["wall_time_s"] / 60, 2),
                     "peak lr": read_json(ctx.out / name / "config.json")["deepspeed"]["optimizer"]["params"]["lr"],
                     "final lr / peak": m["config"]["train"].get("final_lr_fraction", 0.0),
                     "precision": m["precision"], "threads": m.get("torch_threads"),
                     "final val loss": log["val_loss"].dropna().iloc[-1]})
    return pd.DataFrame(rows).set_index("run")


def deepspeed_command(num_gpus: int, tcfg, out: Path) -> list[str]:
    """The DeepSpeed-launcher command line that trains (or resumes) `tcfg` into `out`."""
    cmd = ["deepspeed", f"--num_gpus={num_gpus}", "--module", "twotower_lib", "train",
           "--model", tcfg.model, "--preset", tcfg.preset, "--seed", str(tcfg.seed), "--towers", str(tcfg.towers),
           "--max-steps", str(tcfg.max_steps), "--micro-batch", str(tcfg.micro_batch), "--grad-accum", str(tcfg.grad_accum),
           "--final-lr-fraction", str(tcfg.final_lr_fraction), "--precision", tcfg.precision,
           "--eval-every-steps", str(tcfg.eval_every_steps), "--data", str(tcfg.data), "--out", str(out)]
    return (cmd + (["--lr", str(tcfg.lr)] if tcfg.lr is not None else [])
            + (["--deepspeed-config", tcfg.deepspeed_config] if tcfg.deepspeed_config else [])
            + (["--resume"] if (out / "config.json").exists() else []))


def _deepspeed_train(ctx: SectionContext, tcfg, out: Path) -> None:
    """Multi-GPU training through the DeepSpeed launcher (one process per GPU), as the paper did."""
    import subprocess

    cmd = deepspeed_command(ctx.profile.num_gpus, tcfg, out)
    if subprocess.run(cmd).returncode != 0:
        raise UserError(f"DeepSpeed training of {out.name} failed; the command was: {' '.join(cmd)}")


def training_log(ctx: SectionContext, runs: list[str] | None = None) -> pd.DataFrame:
    """The logged training and validation loss of each run (default: the cases) against tokens seen (long table)."""
    import json

    import pandas as pd

    frames = []
    for name in runs or [case_name(m, s) for m, s in ctx.profile.case_list()]:
        run = ctx.root / find_section("01_training", ctx.sections).output / name
        with open(run / "log.jsonl", encoding="utf-8") as f:
            records = [r for r in map(json.loads, f) if "tokens" in r]
        frames.append(pd.DataFrame(records).assign(case=name))
    return pd.concat(frames, ignore_index=True)


def probe_cases(ctx: SectionContext) -> pd.DataFrame:
    """Probe every trained case into 02_probing's output; return one summary row per case.

    Every case's probe also trains heads with a second seed (`ProbeConfig.replicate`), for the
    probe-seed reliability. Probes run one at a time on every core, unlike training runs
    (`threads_per_run`): two probes side by side on one thread each took 1.05x longer than one after
    the other on the reference machine (their (N, V) logits compete for memory bandwidth)."""
    import pandas as pd

    from twotower_lib.preference import load_artifact
    from twotower_lib.probe import probe_run

    training = ctx.input_dir("01_training")
    names = [case_name(model, seed) for model, seed in ctx.profile.case_list()]
    for name in names:
        if not (training / name / "model.safetensors").exists():
            raise UserError(f"case {name} has no trained model in {training}; train it with:  "
                            f"{run_command('01_training', ctx.profile.name, runs_dir=ctx.root.parent)}")
    paths = [probe_run(**_probe_args(ctx, name, ctx.out / name, replicate=True)) for name in names]
    rows = []
    for name, path in zip(names, paths):
        m = load_artifact(path).manifest
        rows.append({"case": name, "primary tower": m["ordering"]["primary_tower"],
                     "mean p (primary)": max(m["ordering"]["mean_p"]), "mean p (secondary)": min(m["ordering"]["mean_p"]),
                     **{f"val loss, {k}": v for k, v in m["val_loss"].items()},
                     "tokens scored": m["scored_tokens"], "head epochs": m["heads"]["epochs"],
                     "minutes": round(m["seconds"]["total"] / 60, 2)})
    return pd.DataFrame(rows).set_index("case")


def _probe_args(ctx: SectionContext, run: str, out: Path, snapshot: int | None = None,
                replicate: bool = False) -> dict[str, Any]:
    return {"run_dir": str(ctx.input_dir("01_training") / run), "cfg": ctx.profile.probe_config(replicate),
            "snapshot": snapshot, "data_dir": str(ctx.input_dir("00_data") / "prepared"), "out": str(out)}


def probe_quality(ctx: SectionContext) -> pd.DataFrame:
    """How well every probe of 02_probing did its job, one row per probe (cases and controls).

    - *head − cooperative*: the better head's validation loss minus the cooperative model's. For a
      single-tower run (the independent control's k = 1 models) the tower carries everything its
      decoder used, so this gap is the **probe shortfall**: what the head fails to read (goal <= 0.05 nats).
    - epochs and why head training stopped; the tower order by both rules (mean p, Eq. 3; mean log p).
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
                     "order margin (mean p)": o["margin"] if m["towers"] == 2 else float("nan"),
                     "order rules agree": o.get("rules_agree", True),
                     "minutes": round(m["seconds"]["total"] / 60, 2)})
    return pd.DataFrame(rows).set_index("probe")


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
        for point in m["heads"]["curve"]:
            for split in ("train", "heldout"):
                for i, loss in enumerate(point[f"{split}_loss"]):
                    rows.append({"probe": name, "epoch": point["epoch"], "head": f"tower {i % k}" + (" (seed 2)" if i >= k else ""),
                                 "split": split, "loss": loss})
    return pd.DataFrame(rows)


def probe_reliability(ctx: SectionContext, scores: dict) -> pd.DataFrame:
    """Per case: the probe-seed reliability over the profile's top_n tokens in both score variants
    (`correlation.same_run_agreement` against `probe.replicate_table`), and whether the replicate heads
    named the same primary tower."""
    import pandas as pd

    from twotower_lib.analysis.correlation import SCORE_COLUMNS, same_run_agreement
    from twotower_lib.probe import replicate_table

    data = load_data(ctx)
    rows = []
    for name, art in scores.items():
        rep = replicate_table(art.path, data)
        rows.append({"case": name, **{f"reliability ({VARIANTS[c]})": same_run_agreement(
            art.table, rep, data.counts, ctx.profile.top_n, c) for c in SCORE_COLUMNS},
            "replicate names the same primary": art.manifest["replicate"]["ordering"][0] == art.manifest["ordering"]["primary_tower"]})
    return pd.DataFrame(rows).set_index("case")


def recipe_comparison(path: Path | None = None) -> dict[str, pd.DataFrame]:
    """The committed comparison of probe recipes on the same frozen runs (`benchmarks/compare_probe_recipes.py`):
    per run and recipe (`runs`), the runs' correlation per recipe (`pairs`) and each run's agreement
    between recipes (`across_recipes`). Empty when it was not measured."""
    import pandas as pd

    path = path or PROJECT_ROOT / "results" / "probe" / "recipes.json"
    if not path.exists():
        return {}
    found = read_json(path)
    return {"runs": pd.DataFrame(found["runs"]).set_index(["run", "recipe"]),
            "pairs": pd.DataFrame(found["pairs"]).set_index(["recipe", "a", "b"]),
            "across_recipes": pd.DataFrame(found["across_recipes"]).set_index(["run", "a", "b"])}


# The two score variants by their column in the preference table.
VARIANTS = {"score": "log of mean p, Eq. 4", "score_logmean": "mean of log p, authors' code"}


def compare_bert_events(ctx: SectionContext, case: str) -> pd.DataFrame:
    """Probe `case` (a BERT run) a second time with the training corruption (80/10/10) at the probed
    positions, and compare with its [MASK]-only probe: validation losses and the correlation of the
    two score vectors over top_n tokens, in both variants."""
    import pandas as pd

    from twotower_lib.analysis.correlation import SCORE_COLUMNS, same_run_agreement
    from twotower_lib.preference import load_artifact
    from twotower_lib.probe import probe_run

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
                                                                         ctx.profile.top_n, c)
    return out


def correlations(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """Table 2 as a long table: every pair of `scores` over the profile's top_n most frequent tokens,
    with a bootstrap 95% CI that resamples validation documents and a permutation p-value, for one
    score variant (`score`: Eq. 4, log of mean p; `score_logmean`: the authors' mean of log p)."""
    from twotower_lib.analysis.correlation import CorrelationConfig, pairwise_correlations

    cfg = CorrelationConfig(n=ctx.profile.top_n, n_boot=ctx.profile.bootstrap, n_permutations=1000, progress=False,
                            score_col=score_col)
    return pairwise_correlations({k: r.table for k, r in scores.items()}, load_data(ctx).counts, cfg,
                                 doc_stats={k: r.doc_stats for k, r in scores.items()}).assign(variant=score_col)


def side_by_side(by_variant: dict[str, pd.DataFrame], keys: tuple[str, ...] = ("a", "b")) -> pd.DataFrame:
    """Rows of the same pairs in both score variants, r and CI of each next to each other."""
    import pandas as pd

    parts = []
    for col, frame in by_variant.items():
        keep = [c for c in ("r", "ci_low", "ci_high") if c in frame.columns]
        parts.append(frame.set_index(list(keys))[keep].rename(columns=lambda c: f"{c} ({VARIANTS[col]})"))
    return pd.concat(parts, axis=1)


def text_ceilings(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """Per same-configuration pair: each run's split-half reliability over the profile's top_n tokens and the
    ceiling sqrt(rel_a * rel_b) that finite validation text puts on their r (`correlation.text_ceiling`)."""
    from twotower_lib.analysis.correlation import text_ceiling

    return text_ceiling({k: r.table for k, r in scores.items()}, {k: r.doc_stats for k, r in scores.items()},
                        load_data(ctx).counts, same_config_pairs(ctx), ctx.profile.top_n,
                        score_col=score_col).assign(variant=score_col)


def ceilings(ctx: SectionContext, scores: dict, score_col: str = "score") -> pd.DataFrame:
    """Per same-configuration pair, in one score variant: r, the validation-text ceiling
    (`text_ceilings`) and the probe ceiling sqrt(rel_a * rel_b) from each run's probe-seed
    reliability (`probe_reliability`)."""
    import numpy as np

    text = text_ceilings(ctx, scores, score_col).rename(columns={"ceiling": "text ceiling"})
    pairs = same_config_pairs(ctx)
    if not pairs:
        return text
    rel = probe_reliability(ctx, {n: scores[n] for n in dict.fromkeys(x for p in pairs for x in p)})
    col = f"reliability ({VARIANTS[score_col]})"
    text["probe reliability a"] = text["a"].map(rel[col])
    text["probe reliability b"] = text["b"].map(rel[col])
    text["probe ceiling"] = np.sqrt(text["probe reliability a"].clip(lower=0) * text["probe reliability b"].clip(lower=0))
    return text[["variant", "a", "b", "n_tokens", "r", "text ceiling", "probe ceiling", "reliability_a", "reliability_b",
                 "probe reliability a", "probe reliability b"]]


def same_config_pairs(ctx: SectionContext) -> list[tuple[str, str]]:
    """Pairs of cases that differ only in the seed (the paper's Bert-large run 1 and run 2)."""
    return [(case_name(*a), case_name(*b)) for a, b in ctx.profile.same_config_pairs()]


def probe_controls(ctx: SectionContext) -> pd.DataFrame:
    """Probe the controls into 02_probing's output; one summary row per probed run.

    Only the pairs of `control_models` get these two (`Profile.controlled_pairs`):
    - untrained: both runs of each such pair at their snapshot at 0 tokens
      (`untrained/<case>`): heads trained on randomly initialised, frozen towers.
    - independent: per model of such a pair, its four single-tower runs
      (`independent/<run>`), then runs 1+2 and 3+4 scored as pairs (`independent/<model>-pair-1`,
      `-pair-2`) by the same rule as two towers (`probe.pair_runs`).
    """
    import pandas as pd

    from tqdm import tqdm

    from twotower_lib.preference import load_artifact
    from twotower_lib.probe import pair_runs, probe_run

    jobs = [_probe_args(ctx, case_name(m, s), ctx.out / "untrained" / case_name(m, s), snapshot=0)
             for m, s in ctx.profile.untrained_runs()]
    runs = ctx.profile.independent_runs()
    jobs += [_probe_args(ctx, control_name(m, s), ctx.out / "independent" / control_name(m, s)) for m, s in runs]
    paths = [probe_run(**job, show=False) for job in tqdm(jobs, desc="probing controls", unit="probe")]
    rows = []
    for path in paths:
        m = load_artifact(path).manifest
        rows.append({"run": path.relative_to(ctx.out).as_posix(), "control": path.parent.name,
                     **{f"val loss, {k}": v for k, v in m["val_loss"].items()}})
    probes = paths[len(paths) - len(runs):]
    for i in range(0, len(probes), 2):  # seeds 1+2 and 3+4 of each model
        model = runs[i][0]
        out = pair_runs(probes[i], probes[i + 1], ctx.out / "independent" / independent_pair_name(model, i // 2 % 2 + 1),
                        show=False)
        m = load_artifact(out).manifest
        rows.append({"run": out.relative_to(ctx.out).as_posix(), "control": "independent",
                     "primary": control_name(*runs[i + m['ordering']['primary_tower']])})
    return pd.DataFrame(rows).set_index("run") if rows else pd.DataFrame()


def load_controls(ctx: SectionContext) -> list[tuple[str, str, dict]]:
    """The control artifacts 02_probing wrote, as (control, model, {label: artifact}) with two
    artifacts each, to be correlated with one another: the untrained runs of each same-configuration
    pair, and each model's two independent pairs."""
    from twotower_lib.preference import load_artifact

    probing = ctx.input_dir("02_probing")
    out = []
    if "untrained" in ctx.profile.controls:
        for pair in ctx.profile.controlled_pairs():
            names = [case_name(*run) for run in pair]
            out.append(("untrained", pair[0][0],
                        {f"{name} (untrained)": load_artifact(probing / "untrained" / name) for name in names}))
    for model in dict.fromkeys(m for m, _ in ctx.profile.independent_runs()):
        names = [independent_pair_name(model, i) for i in (1, 2)]
        out.append(("independent", model,
                    {f"independent {n}": load_artifact(probing / "independent" / n) for n in names}))
    return out


def control_correlations(ctx: SectionContext, pairs: pd.DataFrame, score_col: str = "score") -> pd.DataFrame:
    """Each control's correlation, computed like the trained same-configuration pair's, one row per control.

    `pairs` are the trained cases' correlations: the label-permutation control is the 97.5%
    quantile of r with the token labels of the same-configuration pair shuffled (its `perm_q975`).
    """
    import pandas as pd

    rows = []
    for control, model, arts in load_controls(ctx):
        r = correlations(ctx, arts, score_col).iloc[0]
        rows.append({"control": control, "model": model, **r.to_dict()})
    if "permutation" in ctx.profile.controls:
        same = same_config_pairs(ctx)
        for row in pairs.itertuples():
            if (row.a, row.b) in same and hasattr(row, "perm_q975"):
                rows.append({"control": "permutation", "model": model_of(row.a), "a": row.a,
                             "b": f"{row.b} (labels shuffled)",
                             "n_tokens": row.n_tokens, "r": row.perm_q975, "variant": score_col,
                             "note": "97.5% quantile of r over 1000 shuffles of the token labels"})
    return pd.DataFrame(rows)


def load_scores(ctx: SectionContext) -> dict:
    """The preference artifact of every case, by case name (for the analysis sections)."""
    from twotower_lib.preference import check_same_vocabulary, load_artifact

    probing = ctx.out if ctx.section.name == "02_probing" else ctx.input_dir("02_probing")
    results = {case_name(m, s): load_artifact(probing / case_name(m, s)) for m, s in ctx.profile.case_list()}
    check_same_vocabulary(list(results.values()))
    return results


def sample_texts(data, split: str, n: int, seed: int = 0) -> list[str]:
    """A seeded sample of `n` documents of `split` (all if fewer), in corpus order, read in one pass."""
    import numpy as np

    total = len(data.documents(split))
    if total == 0:
        raise UserError(f"the prepared data at {data.path} has no {split!r} documents to sample")
    keep = set(np.random.default_rng(seed).permutation(total)[:n].tolist())
    return [t for i, t in enumerate(data.texts(split)) if i in keep]


def vocabulary_pos(ctx: SectionContext, data, tagger) -> pd.DataFrame:
    """Tag `pos_docs` training documents with `tagger` (from `analysis.pos.choose_tagger`) and give each token its
    majority UPOS: the table of `analysis.pos.majority_tags`, also saved in the section's output."""
    from twotower_lib.analysis.pos import vocabulary_pos as tag_vocabulary
    from twotower_lib.artifacts import atomic_write_bytes

    texts = sample_texts(data, "train", ctx.profile.pos_docs, seed=ctx.profile.data_seed)
    table = tag_vocabulary(texts, data.tokenizer, tagger)
    atomic_write_bytes(ctx.out / "vocabulary_pos.parquet", table.to_parquet(index=False))
    return table


def top_token_ids(data, n: int):
    """Ids of the n most frequent tokens of the training split, special tokens left out (ties: lower id)."""
    import numpy as np

    from twotower_lib.preference import frequency_order

    counts = np.asarray(data.counts).copy()
    counts[list(data.special_ids.values())] = -1
    return frequency_order(counts)[: min(n, int((counts > 0).sum()))]


def ica_reference(ctx: SectionContext) -> str:
    """The case name of the profile's `ica_reference`; UserError if it is not one of the cases."""
    if ctx.profile.ica_reference not in ctx.profile.cases:
        raise UserError(f"ica_reference {ctx.profile.ica_reference!r} is not one of the cases {list(ctx.profile.cases)}; "
                        f"pick one with  -p ica_reference MODEL:SEED")
    model, seed = ctx.profile.ica_reference.split(":")
    return case_name(model, int(seed))


def word_ica(ctx: SectionContext, data):
    """Section 5.3's word vectors and their ICA, from the reference case's trained input embedding.

    A seeded sample of `ica_tokens` token occurrences of the training split (whole blocks, special
    tokens left out) picks the rows of the embedding, each occurrence one row; whitening PCA to
    `ica_dim` and Amari ICA follow (`analysis.ica.fit_word_ica`). Returns (fitted WordICA, token
    ids of the distinct sampled tokens, their components (words, d), their occurrences in the sample).
    """
    import numpy as np
    import torch

    from twotower_lib.analysis.ica import ICAConfig, PCAConfig, fit_word_ica, sample_occurrences
    from twotower_lib.models import load_model

    reference = ica_reference(ctx)
    model, _ = load_model(ctx.input_dir("01_training") / reference)
    with torch.no_grad():
        embedding = model.tok_emb.weight.detach().to(torch.float64).numpy()     # (vocab, E)
    ids = sample_occurrences(data.train, ctx.profile.ica_tokens, data.special_ids.values(), ctx.profile.data_seed)
    fitted = fit_word_ica(embedding, ids, PCAConfig(d=ctx.profile.ica_dim), ICAConfig(max_iter=2000))
    token_ids, counts = np.unique(ids, return_counts=True)
    return fitted, token_ids, fitted.transform(embedding[token_ids]), counts


# ---------------------------------------------------------------------- staleness


class _Hashes:
    """sha256 of files, remembered by (size, mtime) so a warm check does not re-read checkpoints."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.known: dict[str, list] = read_json(path)
        except (FileNotFoundError, ValueError):
            self.known = {}
        self.changed = False

    def file(self, p: Path) -> str:
        st = p.stat()
        key = str(p)
        hit = self.known.get(key)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        digest = sha256_file(p)
        self.known[key] = [st.st_size, st.st_mtime_ns, digest]
        self.changed = True
        return digest

    def directory(self, d: Path) -> str | None:
        """Fingerprint of every non-hidden file under `d`; None if `d` has no completed output."""
        if not (d / "section.json").exists():
            return None
        return self.files(d)

    def files(self, d: Path, exclude: tuple[str, ...] = ()) -> str:
        """Fingerprint of every non-hidden file under `d` but those named in `exclude` (of nothing if `d` does not exist)."""
        files = [p for p in sorted(d.rglob("*")) if p.is_file() and p.name not in exclude
                 and not any(part.startswith(".") for part in p.relative_to(d).parts)]
        return sha256_json([[p.relative_to(d).as_posix(), self.file(p)] for p in files])

    def save(self) -> None:
        if self.changed:
            atomic_write_json(self.path, self.known)


@dataclass
class Pipeline:
    """The sections of one profile: where their sources, outputs and records are."""

    profile: Profile
    root: Path                                   # runs/<profile>/
    overrides: dict[str, Any] = field(default_factory=dict)
    notebooks_dir: Path = NOTEBOOKS_DIR
    sections: tuple[Section, ...] = SECTIONS

    def source(self, s: Section) -> Path:
        return self.notebooks_dir / f"{s.name}.py"

    def executed(self, s: Section) -> Path:
        return self.root / "notebooks" / f"{s.name}.ipynb"

    def record_path(self, s: Section) -> Path:
        return self.root / ".pipeline" / f"{s.name}.json"

    def available(self) -> list[Section]:
        """Sections whose notebook exists (the others are not written yet)."""
        return [s for s in self.sections if self.source(s).exists()]

    def plan(self, target: str | None) -> list[Section]:
        """`target` and every section it depends on, in book order (all available sections if None)."""
        if target is None:
            return self.available()
        wanted: set[str] = set()
        stack = [find_section(target, self.sections).name]
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(find_section(name, self.sections).upstream)
        plan = [s for s in self.sections if s.name in wanted]
        missing = [s.name for s in plan if not self.source(s).exists()]
        if missing:
            raise UserError(f"section(s) {missing} have no notebook yet ({self.notebooks_dir}/<name>.py); "
                            f"{target} cannot run before they exist")
        return plan

    def inputs(self, s: Section, hashes: _Hashes) -> dict[str, Any]:
        """Everything a section's result depends on: its source, its parameters, its inputs' outputs."""
        values = self.profile.values()
        return {
            "source": sha256_file(self.source(s)),
            "parameters": {k: values[k] for k in s.parameters},
            "upstream": {u: hashes.directory(self.root / find_section(u, self.sections).output) for u in s.upstream},
            # a profile's own published run (publish.py) is not an input of its sections: publishing must not make them stale
            "committed": {c: hashes.files(PROJECT_ROOT / c, exclude=(f"{self.profile.name}.json",)) for c in s.committed},
        }

    def why_stale(self, s: Section, hashes: _Hashes) -> str | None:
        """None if the recorded run is still valid, else the reason to re-run."""
        try:
            rec = read_json(self.record_path(s))
        except FileNotFoundError:
            return "never ran at this profile"
        except ValueError:
            return "its run record is unreadable"
        now = self.inputs(s, hashes)
        if rec.get("source") != now["source"]:
            return f"its source {self.source(s).name} changed"
        if rec.get("parameters") != now["parameters"]:
            diff = {k: f"{rec.get('parameters', {}).get(k)!r} -> {v!r}" for k, v in now["parameters"].items()
                    if rec.get("parameters", {}).get(k) != v}
            return f"parameters changed: {diff}"
        if rec.get("upstream") != now["upstream"]:
            changed = [u for u in now["upstream"] if rec.get("upstream", {}).get(u) != now["upstream"][u]]
            return f"the output of {', '.join(changed)} changed"
        if rec.get("committed", {}) != now["committed"]:
            return f"the committed results in {', '.join(now['committed'])} changed"
        if not self.executed(s).exists():
            return "its executed notebook is missing"
        if rec.get("output") != hashes.directory(self.root / s.output):
            return f"its output in {self.root / s.output} was changed or removed"
        return None

    def stale(self) -> dict[str, str]:
        """Every written section that is not up to date at this profile, with the reason."""
        hashes = _Hashes(self.root / ".pipeline" / "hashes.json")
        return {s.name: reason for s in self.available() if (reason := self.why_stale(s, hashes))}

    def execute(self, s: Section, log: Callable[[str], None] = print) -> None:
        """Run one section's notebook with papermill into runs/<profile>/notebooks/."""
        import jupytext
        import papermill as pm

        nb_dir = self.root / "notebooks"
        nb_dir.mkdir(parents=True, exist_ok=True)
        source_nb = nb_dir / f".{s.name}.source.ipynb"   # the jupytext conversion, deleted after the run
        running = nb_dir / f".{s.name}.running.ipynb"
        failed = nb_dir / f"{s.name}.failed.ipynb"
        # what this run reads, taken before it starts: a source or committed result edited while it
        # runs must leave the section stale, not be recorded as what ran
        inputs = self.inputs(s, _Hashes(self.root / ".pipeline" / "hashes.json"))
        jupytext.write(jupytext.read(self.source(s)), source_nb, fmt="ipynb")
        # Every parameter explicitly, not only the overridden ones: a default edited and saved in the
        # notebook must not change what runs here (the run record names these values).
        params: dict[str, Any] = {"profile": self.profile.name, "runs_dir": str(self.root.parent)}
        params.update({k: _to_text(v) if isinstance(v, list) else v
                       for k, v in self.profile.values().items() if k in s.parameters})
        # A failed run must not leave a stale "good" result behind.
        self.record_path(s).unlink(missing_ok=True)
        self.executed(s).unlink(missing_ok=True)
        failed.unlink(missing_ok=True)
        t0 = time.time()
        try:
            pm.execute_notebook(str(source_nb), str(running), parameters=params, kernel_name="python3", language="python",
                                cwd=str(self.notebooks_dir.parent), progress_bar=True, log_output=False)
        except pm.PapermillExecutionError as e:
            os.replace(running, failed)
            raise UserError(f"section {s.name} failed in cell {e.exec_count}: {e.ename}: {e.evalue}\n"
                            f"The executed notebook with the full traceback is {failed}") from None
        finally:
            source_nb.unlink(missing_ok=True)
        os.replace(running, self.executed(s))
        hashes = _Hashes(self.root / ".pipeline" / "hashes.json")
        output = hashes.directory(self.root / s.output)
        if output is None:
            raise UserError(f"section {s.name} ran but did not mark its output complete "
                            f"({self.root / s.output / 'section.json'} is missing): its notebook must end "
                            "with `ctx.finish(...)`")
        atomic_write_json(self.record_path(s), {
            **inputs, "section": s.name, "output": output,
            "notebook": str(self.executed(s)), "seconds": round(time.time() - t0, 1),
            "provenance": provenance()})
        hashes.save()
        log(f"{s.name}: done in {time.time() - t0:.1f} s -> {self.executed(s)}")

    def run(self, target: str | None = None, force: bool = False, log: Callable[[str], None] = print) -> list[str]:
        """Run what is stale among `target` and its upstream sections; return the names that ran."""
        plan = self.plan(target)
        unread = sorted(set(self.overrides) - {p for s in plan for p in s.parameters})
        if unread:
            readers = {k: [s.name for s in self.sections if k in s.parameters] for k in unread}
            raise UserError(f"parameter(s) {unread} are not read by the section(s) being run "
                            f"({', '.join(s.name for s in plan)}); they belong to {readers}"
                            + ("" if target is None else ": run that section instead"))
        ran = []
        for s in plan:
            hashes = _Hashes(self.root / ".pipeline" / "hashes.json")
            reason = "--force" if force else self.why_stale(s, hashes)
            hashes.save()
            if reason is None:
                log(f"{s.name}: up to date (source, parameters and inputs unchanged)")
                continue
            log(f"{s.name}: running ({reason})")
            self.execute(s, log)
            ran.append(s.name)
        not_written = [s.name for s in self.sections if s not in self.available()]
        if target is None and not_written:
            log(f"not written yet (no notebook): {', '.join(not_written)}")
        return ran


def make_pipeline(profile: str = DEFAULT_PROFILE, overrides: dict[str, Any] | None = None,
                  runs_dir: str | Path | None = None, **kw: Any) -> Pipeline:
    """A Pipeline for `profile` with `-p` overrides validated up front (UserError on any bad one)."""
    prof = get_profile(profile).with_overrides(dict(overrides or {}))
    return Pipeline(prof, profile_dir(prof.name, runs_dir), {k: getattr(prof, k) for k in (overrides or {})}, **kw)


# ---------------------------------------------------------------------- CLI


def parse_overrides(pairs: list[list[str]]) -> dict[str, str]:
    """`-p KEY VALUE` pairs as a dict (UserError if a key is given twice)."""
    overrides: dict[str, str] = {}
    for key, value in pairs:
        if key in overrides:
            raise UserError(f"-p {key} is given twice")
        overrides[key] = value
    return overrides


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("section", nargs="?", default=None,
                   help="run this section and what it needs (e.g. 00_data or data); default: all")
    p.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES),
                   help=f"settings bundle (default {DEFAULT_PROFILE}); see twotower_lib.profiles")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                   help=f"override one profile field for this run; keys: {', '.join(OVERRIDABLE)}")
    p.add_argument("--runs-dir", default=None, help="where runs/<profile>/ lives (default $TWOTOWER_RUNS, else the project's runs/)")
    p.add_argument("--force", action="store_true", help="re-run even what is up to date")


def main(args: argparse.Namespace) -> int:
    from twotower_lib import scorecard

    pipe = make_pipeline(args.profile, parse_overrides(args.parameter), args.runs_dir)
    t0 = time.time()
    pipe.run(args.section, force=args.force)
    card = scorecard.write(pipe.root, pipe.sections, {s.name for s in pipe.available()})
    print(f"scorecard: {pipe.root / 'scorecard.json'} ("
          + ", ".join(f"{n} {v}" for v, n in card["counts"].items()) + ")")
    print(f"finished in {time.time() - t0:.1f} s; build the book with: python -m twotower_lib book --profile {args.profile}"
          + (f" --runs-dir {args.runs_dir}" if args.runs_dir else ""), file=sys.stderr)
    return 0
