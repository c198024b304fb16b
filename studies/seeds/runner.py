"""Train and probe the seed study, resumably, then write its report.

`python -m studies.seeds` trains four seeds (`--seeds`) of every tower family of a profile at that
profile's sizes, budgets and data, probes them with the profile's probe, and measures the controls
with as many pairs as each family has:

- *untrained*: every seed's towers at 0 tokens (the run's first snapshot), probed the same way (on a new
  checkout whose trained probes are exported, from a one-step run of the same configuration);
- *independent*: single-tower runs paired as if they were two towers (`probe.pair_runs`), two
  single-tower seeds a pseudo-model, so 2 x seeds single-tower runs give as many pairs as the cases
  (for the profile's `control_models`, or every family where it names none; `--independent` names others);
- *shuffled*: one pair's token labels permuted (computed in the report, no training).

Work goes in order of what it tells: the cases family by family, then the untrained controls, then
the independent runs pair by pair, so an interrupted study leaves whole families (and pairs) behind
it. Runs and probes that are finished are kept (an interrupted command resumes). Runs the profile's own pipeline trains
(its cases, e.g. gpt:1 and gpt:2 of `cpu`, and its independent-control runs) are trained into the
pipeline's `training/` folder with the same configuration, so the two share them bit for bit.

Everything lands under `runs/<profile>/seeds/`; the report writes `results/seeds/<profile>/`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from twotower_lib.artifacts import read_json
from twotower_lib.book.profiles import Profile, get_profile, profile_dir
from twotower_lib.errors import UserError
from twotower_lib.run_names import case_name, control_name
from studies.seeds.exports import export_path, export_probe, is_current, made_by

FAMILIES = ("gpt", "bert-large", "bert-base", "elmo")  # the order the work goes in
CONTROL_KINDS = ("untrained", "independent", "shuffled")


@dataclass(frozen=True)
class Layout:
    """Where a profile's seed study keeps its runs and probes."""

    profile: Profile
    root: Path                                   # runs/<profile>/

    @property
    def study(self) -> Path:
        return self.root / "seeds"

    @property
    def data(self) -> Path:
        return self.root / "data" / "prepared"  # the pipeline's 00_data output: one prepared corpus for both

    def run_dir(self, model: str, seed: int, towers: int = 2) -> Path:
        """A two-tower case or a single-tower control run: in the pipeline's training folder when the
        profile's pipeline trains it too, or trained it with earlier settings (the same weights: it is not
        trained twice), else in the study's own."""
        name = case_name(model, seed) if towers == 2 else control_name(model, seed)
        shared = (model, seed) in (self.profile.case_list() if towers == 2 else self.profile.independent_runs())
        pipeline = self.root / "training" / name
        return pipeline if shared or (pipeline / "manifest.json").exists() else self.study / "training" / name

    def probe_dir(self, kind: str, name: str) -> Path:
        """kind: "cases", "untrained", "independent" (single-tower probes) or "pairs" (their pairings)."""
        return self.study / "probing" / kind / name


def probe_job(run_dir: str, cfg, data_dir: str, out: str, snapshot: int | None = None, export: str | None = None,
              top_n: int = 0) -> str:
    """One probe, from paths only (a module-level function: `workers.run_jobs` runs it in a worker), exported at once
    to `export` (`exports.export_probe`; the minutes of the run it trained, unless it probes snapshot 0)."""
    from twotower_lib.probe.run import probe_run

    path = probe_run(run_dir, cfg, snapshot=snapshot, data_dir=data_dir, out=out, show=False)
    if export is not None:
        write_export(Path(path), Path(export), data_dir, top_n, None if snapshot == 0 else Path(run_dir))
    return str(path)


def write_export(probe: Path, export: Path, data_dir: str, top_n: int, run: Path | None = None) -> None:
    """`exports.export_probe` with the token counts of the prepared data in `data_dir`."""
    from twotower_lib.data import load_prepared

    export_probe(probe, export, load_prepared(data_dir).counts, top_n, run)


def _finished(run: Path, steps: int) -> bool:
    return (run / "manifest.json").exists() and read_json(run / "manifest.json")["steps"] >= steps


def _probed(out: Path, cfg=None) -> bool:
    """A finished probe at `out` (with `cfg`'s settings and the current probe version, where `cfg` is given;
    `probe_run` itself also checks the weights and data it was made from)."""
    if not (out / "manifest.json").exists():
        return False
    return cfg is None or made_by(read_json(out / "manifest.json").get("identity", {}), cfg)


def train_runs(layout: Layout, runs: list[tuple[str, int, int]], threads: int, exported=lambda model, seed, towers: False) -> None:
    """Train (or resume) every (model, seed, towers) not yet finished, side by side, except those whose probes are all
    `exported` already (a new checkout: the committed exports stand for them)."""
    from twotower_lib.train.loop import train_job
    from twotower_lib.workers import run_jobs

    jobs = []
    for model, seed, towers in runs:
        tcfg = layout.profile.train_config(model, seed, layout.data, towers=towers)
        out = layout.run_dir(model, seed, towers)
        if not _finished(out, tcfg.max_steps) and not exported(model, seed, towers):
            jobs.append({"tcfg": tcfg, "data_path": str(layout.data), "out": str(out)})
    run_jobs(train_job, jobs, threads, "seed study: training", label=lambda j: Path(j["out"]).name)


def first_snapshot_run(layout: Layout, model: str, seed: int) -> Path:
    """The run holding a case's weights at 0 tokens: the case's own run where this machine trained it, else a
    one-step run of the same configuration in `seeds/init/` (`train_first_snapshots`)."""
    run = layout.run_dir(model, seed)
    return run if (run / "snapshots").exists() else layout.study / "init" / case_name(model, seed)


def train_first_snapshots(layout: Layout, runs: list[tuple[str, int]], threads: int) -> None:
    """Write the weights at 0 tokens of every (model, seed) whose case run is not on this machine (a new checkout,
    its trained probe exported): one optimizer step of the case's configuration, whose snapshot 0 is the case's
    own byte for byte (the initialization is seeded before any step and any data), instead of its whole training."""
    from dataclasses import replace

    from twotower_lib.train.loop import train_job
    from twotower_lib.workers import run_jobs

    jobs = []
    for model, seed in runs:
        out = first_snapshot_run(layout, model, seed)
        if out != layout.run_dir(model, seed) and not _finished(out, 1):
            tcfg = replace(layout.profile.train_config(model, seed, layout.data), max_steps=1, budget_s=None)
            jobs.append({"tcfg": tcfg, "data_path": str(layout.data), "out": str(out)})
    run_jobs(train_job, jobs, threads, "seed study: weights at 0 tokens", label=lambda j: Path(j["out"]).name)


def share_pipeline_probes(layout: Layout, names: list[str], cfg) -> list[str]:
    """Copy the pipeline's probe of a shared case (`runs/<profile>/probing/<name>`) into the study where it is
    the artifact the study would make: the study's probe settings and version, and the weights of the run the
    study reads (their sha256). Returns the names copied; the rest are probed as usual."""
    import shutil

    from twotower_lib.artifacts import sha256_file
    from twotower_lib.models import weights_path

    copied = []
    for name in names:
        source, target = layout.root / "probing" / name, layout.probe_dir("cases", name)
        run = layout.root / "training" / name
        if _probed(target) or not _probed(source, cfg) or not (run / "manifest.json").exists():
            continue
        if read_json(source / "manifest.json")["identity"].get("weights_sha256") != sha256_file(weights_path(run)):
            continue
        shutil.copytree(source, target)
        copied.append(name)
    return copied


def probe_runs(layout: Layout, probes: list[dict], threads: int, precision: str | None = None) -> None:
    """Probe every job of `probes` (run_dir, out, export, snapshot) whose export is missing or out of date, and export
    it (`probe_run` itself keeps an up-to-date artifact, which is then only exported)."""
    from twotower_lib.workers import run_jobs

    cfg = study_probe_config(layout, precision)
    wanted = lambda p: (not is_current(Path(p["export"]), cfg)       # or a half of a pseudo-model not yet paired
                        or ("halves_of" in p and not p["halves_of"].exists() and not _probed(Path(p["out"]), cfg)))
    jobs = [{"run_dir": p["run_dir"], "cfg": cfg, "data_dir": str(layout.data), "out": p["out"],
             "snapshot": p.get("snapshot"), "export": str(p["export"]), "top_n": layout.profile.analysis.top_n}
            for p in probes if wanted(p)]
    run_jobs(probe_job, jobs, threads, "seed study: probing", label=lambda j: Path(j["out"]).name)


def study_probe_config(layout: Layout, precision: str | None = None):
    """The study's probe: the profile's without its replicate heads, at `precision` where one is pinned."""
    return layout.profile.probe_config(replicate=False, **({"precision": precision, "score_precision": precision}
                                                          if precision else {}))


def run_study(profile: Profile, seeds: int, families: tuple[str, ...], controls: tuple[str, ...],
              threads: int, results: Path, root: Path | None = None, precision: str | None = None,
              probe_threads: int | None = None, independent: tuple[str, ...] | None = None) -> Layout:
    """Prepare the data, then each family's cases, then the controls; every step resumes, within a machine from
    `runs/` and across machines from the exports in `results` (the profile's folder of the study's results).
    `independent`: the families whose independent control is measured (default: the profile's `control_models`
    among `families`)."""
    from twotower_lib.data.prepare import prepare_data
    from twotower_lib.probe.run import pair_runs

    layout = Layout(profile, root or profile_dir(profile.name))
    probe_threads = probe_threads or os.cpu_count() or 1
    prepare_data(profile.data_config(), out=layout.data)
    cfg, seed_list = study_probe_config(layout, precision), range(1, seeds + 1)
    pair_export = lambda m, i: export_path(results, "pairs", f"{m}-pair-{i}")
    single_export = lambda m, s: export_path(results, "independent", control_name(m, s))

    def exported(m: str, s: int, towers: int) -> bool:  # the untrained control needs only the run's first snapshot
        if towers == 2:
            return is_current(export_path(results, "cases", case_name(m, s)), cfg)
        return is_current(single_export(m, s), cfg) and pair_export(m, (s + 1) // 2).exists()

    def case(m: str, s: int, kind: str = "cases") -> dict:
        run = layout.run_dir(m, s) if kind == "cases" else first_snapshot_run(layout, m, s)
        return {"run_dir": str(run), "out": str(layout.probe_dir(kind, case_name(m, s))),
                "export": export_path(results, kind, case_name(m, s)), **({"snapshot": 0} if kind == "untrained" else {})}

    for model in families:
        t0 = time.time()
        train_runs(layout, [(model, s, 2) for s in seed_list], threads, exported)
        if precision is None:  # a pinned precision makes other artifacts than the pipeline's
            shared = share_pipeline_probes(layout, [case_name(model, s) for s in seed_list], cfg)
            if shared:
                print(f"seed study: the pipeline's probes of {', '.join(shared)} shared", flush=True)
        probe_runs(layout, [case(model, s) for s in seed_list], probe_threads, precision)
        print(f"seed study: {model} cases done ({(time.time() - t0) / 60:.1f} min this call)", flush=True)
    if "untrained" in controls:
        missing = [(m, s) for m in families for s in seed_list
                   if not is_current(export_path(results, "untrained", case_name(m, s)), cfg)]
        train_first_snapshots(layout, missing, threads)
        probe_runs(layout, [case(m, s, "untrained") for m, s in missing], probe_threads, precision)
    if "independent" in controls:
        # the independent control costs 2 x seeds single-tower runs a family: the profile's control_models by default
        controlled = independent_families(profile, families, independent)
        for m in controlled:     # pair by pair: a new machine loses at most one pair's training (runs/ is not committed)
            for i in range(1, seeds + 1):
                singles = [(m, s, 1) for s in (2 * i - 1, 2 * i)]
                train_runs(layout, singles, threads, exported)
                probe_runs(layout, [{"run_dir": str(layout.run_dir(m, s, 1)), "export": single_export(m, s),
                                     "out": str(layout.probe_dir("independent", control_name(m, s))),
                                     "halves_of": pair_export(m, i)} for m, s, _ in singles], probe_threads, precision)
                if pair_export(m, i).exists():
                    continue
                a, b = (layout.probe_dir("independent", control_name(m, s)) for s in (2 * i - 1, 2 * i))
                out = layout.probe_dir("pairs", f"{m}-pair-{i}")
                if not _probed(out):
                    pair_runs(a, b, out, show=False)
                write_export(out, pair_export(m, i), str(layout.data), profile.analysis.top_n)
    return layout


def independent_families(profile: Profile, families: tuple[str, ...], named: tuple[str, ...] | None) -> list[str]:
    """The families whose independent control the study measures: `named`, or the profile's `control_models`
    among `families` (every family where the profile names none)."""
    if named is not None:
        return list(named)
    return [m for m in families if not profile.analysis.control_models or m in profile.analysis.control_models]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="cpu", help="the profile whose sizes, budgets, data and probe the study uses")
    p.add_argument("--seeds", type=int, default=4, help="seeds per family (pairs: seeds x (seeds - 1) / 2)")
    p.add_argument("--families", default=",".join(FAMILIES), help="tower families, in the order they are run")
    p.add_argument("--controls", default=",".join(CONTROL_KINDS),
                   help=f"controls measured beside the cases: any of {', '.join(CONTROL_KINDS)}")
    p.add_argument("--independent", default=None,
                   help="families whose independent control is measured (2 x seeds single-tower runs each; default: "
                        "the profile's analysis.control_models)")
    p.add_argument("--threads-per-run", type=int, default=1,
                   help="CPU threads per training run, as many side by side as the cores allow")
    p.add_argument("--probe-threads", type=int, default=None,
                   help="CPU threads per probe (default: every core, one probe at a time: side by side, probes "
                        "compete for memory bandwidth and each runs several times slower)")
    p.add_argument("--probe-precision", choices=("fp32", "bf16"), default=None,
                   help="pin the probes' matmul precision (default: the profile's probe, whose `auto` resolves by a "
                        "timing on the machine; each probe records what it resolved to)")
    p.add_argument("--report-only", action="store_true", help="write the report from what is finished; train nothing")
    p.add_argument("--reliability", action="store_true",
                   help="train nothing; measure the text reliability of each finished case probe on this machine into "
                        "reliability.csv, beside the committed report (`report.write_reliability`)")
    p.add_argument("--context", action="store_true",
                   help="train nothing; add the word-frequency loss and each run's loss beyond it to a committed report "
                        "written before the context gate (`report.write_context`)")
    p.add_argument("--results", default=None, help="the study's results folder (default results/seeds); the report "
                                                  "goes into its <profile>/ subfolder")


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.seeds", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        profile = get_profile(args.profile)
        families = tuple(f.strip() for f in args.families.split(",") if f.strip())
        unknown = [f for f in families if f not in profile.models]
        if unknown or not families:
            raise UserError(f"--families {args.families!r}: profile {profile.name!r} defines {sorted(profile.models)}")
        controls = tuple(c.strip() for c in args.controls.split(",") if c.strip())
        if set(controls) - set(CONTROL_KINDS):
            raise UserError(f"--controls {args.controls!r}: choose among {', '.join(CONTROL_KINDS)}")
        independent = (None if args.independent is None else
                       tuple(f.strip() for f in args.independent.split(",") if f.strip()))
        if independent is not None and set(independent) - set(families):
            raise UserError(f"--independent {args.independent!r}: name families of --families ({', '.join(families)})")
        if args.seeds < 2:
            raise UserError(f"--seeds {args.seeds}: a distribution over pairs needs at least 2 seeds (4 give 6 pairs)")
        t0 = time.time()
        layout = Layout(profile, profile_dir(profile.name))
        from studies.seeds.report import RESULTS, write_context, write_reliability, write_report  # read when done

        out = (Path(args.results) if args.results else RESULTS) / profile.name
        if args.report_only or args.reliability:      # a new checkout: the exports and the profile's corpus suffice
            from twotower_lib.data.prepare import prepare_data

            prepare_data(profile.data_config(), out=layout.data)
        elif not args.context:
            run_study(profile, args.seeds, families, controls, args.threads_per_run, out, precision=args.probe_precision,
                      probe_threads=args.probe_threads, independent=independent)
        command = "python -m studies.seeds " + " ".join(argv if argv is not None else sys.argv[1:])
        if args.context:
            print(f"seed study's context beyond word frequencies -> {write_context(layout, out, command)}")
            return 0
        if args.reliability:
            print(f"seed study's text reliabilities -> {write_reliability(layout, args.seeds, families, out, command)}")
            return 0
        write_report(layout, args.seeds, families, controls, out,
                     study_seconds=None if args.report_only else time.time() - t0, command=command)
        print(f"seed study report -> {out}")
        return 0
    except UserError as e:
        print(f"error: {e}")
        return 1
