"""`python -m twotower_lib publish`: commit what a finished profile run measured, so the book can show it.

Why: the book is built from one profile's runs (the default, `cpu`, re-runs in an hour). A profile
that takes a night (`cpu-long`) or hardware the book's machine lacks (`gpu`, `paper`) cannot be
re-run whenever the book is built, so its results are committed instead: one small JSON file,
`results/profiles/<profile>.json`, with the scorecard, every section's recorded summary and
parameters, how long each section ran, and the provenance (code version, packages, machine).
The scorecard page and section 07 show every published profile beside the book's own run.

Only a complete, up-to-date run is published: every section must have run at that profile with
the same source, parameters and inputs it has now (the pipeline's own staleness check).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from twotower_lib import paper
from twotower_lib.paper import SAME_CONFIG_R
from twotower_lib.artifacts import atomic_write_json, provenance, read_json
from twotower_lib.book import scorecard
from twotower_lib.book.pipeline import Pipeline, make_pipeline, parse_overrides
from twotower_lib.book.profiles import DEFAULT_PROFILE, PROFILES
from twotower_lib.book.sections import PROJECT_ROOT, find_section
from twotower_lib.errors import UserError
from twotower_lib.probe.config import CURRENT_PROBE, PROBE_VERSION, probe_label
from twotower_lib.run_names import case_name, control_name, model_of

RESULTS_DIR = PROJECT_ROOT / "results" / "profiles"
FORMAT_VERSION = 1


def collect(pipe: Pipeline) -> dict[str, Any]:
    """Everything a finished run of `pipe`'s profile publishes (UserError if a section is missing or stale)."""
    problems = [f"{name}: {reason}" for name, reason in pipe.stale().items()]
    if problems:
        raise UserError(f"the run in {pipe.root} is not complete and up to date, so it cannot be published:\n  "
                        + "\n  ".join(problems) + f"\nFinish it first:  python -m twotower_lib run --profile "
                        f"{pipe.profile.name} (with the same -p parameters as the run, if any)")
    sections = {}
    for s in pipe.sections:
        record = read_json(pipe.record_path(s))
        done = read_json(pipe.root / s.output / "section.json")
        sections[s.name] = {"seconds": record["seconds"], "code_version": record["provenance"]["code_version"],
                            "finished": record["provenance"]["created"], "parameters": done.get("parameters", {}),
                            "summary": done.get("summary", {})}
    card = scorecard.build(pipe.root, pipe.sections)
    return {"format": FORMAT_VERSION, "rules": paper.RULES_EDITION, "profile": pipe.profile.name,
            "settings": pipe.profile.values(),
            "probe": {"version": PROBE_VERSION, "config": asdict(pipe.profile.probe_config())},
            "overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in pipe.overrides.items()},
            "section_seconds": round(sum(s["seconds"] for s in sections.values()), 1),
            "training": training_runs(pipe), "probes": probe_runs(pipe), "scorecard": card, "sections": sections,
            "provenance": provenance()}


def training_runs(pipe: Pipeline) -> list[dict[str, Any]]:
    """Per training run: tokens seen and its own wall time (summed over resumes, unlike the section's)."""
    out = pipe.root / find_section("01_training", pipe.sections).output
    rows = []
    for manifest in sorted(out.glob("*/manifest.json")):
        m = read_json(manifest)
        rows.append({"run": manifest.parent.name, "tokens_seen": m["tokens_seen"], "steps": m["steps"],
                     "minutes": round(m["wall_time_s"] / 60, 2), "threads": m.get("torch_threads")})
    return rows


def probe_runs(pipe: Pipeline) -> list[dict[str, Any]]:
    """Per probe the section makes (cases, controls, the BERT events comparison): its own wall time and
    epochs, whichever execution of the section made it (a cached probe keeps the minutes it took)."""
    out = pipe.root / find_section("02_probing", pipe.sections).output
    prof = pipe.profile
    made = ([case_name(*c) for c in prof.case_list()] + [f"untrained/{case_name(*r)}" for r in prof.untrained_runs()]
            + [f"independent/{control_name(*r)}" for r in prof.independent_runs()]
            + [str(p.parent.relative_to(out)) for p in out.glob("comparisons/*-corrupt/manifest.json")])
    rows = []
    for manifest in (out / name / "manifest.json" for name in made):
        if not manifest.exists():
            continue
        m = read_json(manifest)
        rows.append({"probe": str(manifest.parent.relative_to(out)), "minutes": round(m["seconds"]["total"] / 60, 3),
                     "epochs": m.get("heads", {}).get("epochs"), "code_version": m["provenance"]["code_version"]})
    return rows


def run_minutes(pub: dict[str, Any], kind: str) -> float:
    """A published run's training or probing time: each run's own wall minutes, summed."""
    return sum(r["minutes"] for r in pub.get(kind, []))


def publish(pipe: Pipeline, results_dir: Path = RESULTS_DIR) -> Path:
    """Write `results_dir/<profile>.json` from the finished run of `pipe`'s profile."""
    from twotower_lib.analysis.uncertainty import all_bias_corrected

    return atomic_write_json(Path(results_dir) / f"{pipe.profile.name}.json", all_bias_corrected(collect(pipe)))


def load_published(results_dir: Path = RESULTS_DIR, exclude: str | None = None) -> dict[str, dict[str, Any]]:
    """Every published profile run (profile name -> what `collect` wrote, its verdicts over seeds decided by
    today's rules: `scorecard.redecided`), but `exclude`."""
    out = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        pub = read_json(path)
        if pub.get("format") != FORMAT_VERSION:
            raise UserError(f"{path} has format {pub.get('format')!r}, this version reads {FORMAT_VERSION}; "
                            f"publish it again: python -m twotower_lib publish --profile {path.stem}")
        if pub["profile"] != exclude:
            out[pub["profile"]] = {**pub, "scorecard": scorecard.redecided(pub["scorecard"])}
    return out


def same_config_table(published: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Each published profile's same-configuration pairs (section 03): r, its CI and the highest control |r|
    of the pair's own model, with the verdict rule of the scorecard (which reads |r|)."""
    rows = []
    for name, pub in published.items():
        summary = pub["sections"].get("03_correlations", {}).get("summary", {})
        controls = pd.DataFrame(summary.get("controls", []), columns=["control", "r", "model"])
        for pair in summary.get("same_config", []):
            own = controls[controls["model"].isna() | (controls["model"] == model_of(pair["a"]))]
            top = float(own["r"].abs().max()) if len(own) else None
            rows.append({"profile": name, "probe": probe_name(pub), "pair": f"{pair['a']} vs {pair['b']}", "r": pair["r"],
                         "ci_low": pair["ci_low"], "ci_high": pair["ci_high"], "highest control": top,
                         "verdict": paper.correlation_verdict((pair["ci_low"], pair["ci_high"]), SAME_CONFIG_R, top)})
    return pd.DataFrame(rows, columns=["profile", "probe", "pair", "r", "ci_low", "ci_high", "highest control", "verdict"])


def probe_name(pub: dict[str, Any]) -> str:
    """The probe a published run was measured with, as its tables label it ("earlier" before probes recorded
    themselves); a probe other than the current one says so."""
    probe = pub.get("probe")
    if probe is None:
        return "earlier (not the current)"
    label = probe_label(probe["version"], probe["config"].get("precondition"))
    return label if label == CURRENT_PROBE else f"{label} (not the current)"


def probe_note(pub: dict[str, Any]) -> str:
    """Which probe measured a published run: runs published before the probe recorded itself used the
    earlier one (fixed three epochs on raw tower states, BERT scored with the 80/10/10 corruption)."""
    probe = pub.get("probe")
    if probe is None:
        return ("**Measured with the earlier probe** (three fixed epochs of head training on raw tower states, "
                "BERT scored with the training corruption): section 02 shows what it missed; these numbers are "
                "not comparable with the current probe's until the profile is run again.")
    c = probe["config"]
    cooldown = f", then {c['cooldown_epochs']} epoch(s) with the rate falling to 0" if c.get("cooldown_epochs") else ""
    whitened = "whitened " if c.get("precondition") == "whiten" else ""
    flag = ("" if probe_label(probe["version"], c.get("precondition")) == CURRENT_PROBE else
            f" Not the current probe (version {CURRENT_PROBE}): not comparable with its numbers until run again.")
    return (f"Probe version {probe['version']}: {c['head']} heads on {whitened}{c['features']} features, trained until the "
            f"held-out loss stopped improving by {c['tol']} nats{cooldown}, BERT probed with {c['bert_events']} events.{flag}")


def machine(provenance: dict[str, Any]) -> str:
    """The CPU a published run was made on, as the record names it: minutes compare only on one kind of machine."""
    cpu = provenance.get("cpu")
    return f"{cpu['model']} with {', '.join(cpu['flags'])}" if cpu else "CPU not recorded"


def overview(published: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per published profile: when, from which code, how long its sections ran, its verdicts."""
    return pd.DataFrame([{"profile": name, "probe": probe_name(pub), "published": pub["provenance"]["created"][:10],
                          "code version": str(pub["provenance"]["code_version"])[:12], "CPU": machine(pub["provenance"]),
                          "minutes (sections, last execution)": round(pub["section_seconds"] / 60, 1),
                          "training runs": len(pub["training"]),
                          "run-minutes of training": round(run_minutes(pub, "training"), 1),
                          "probe-minutes": round(run_minutes(pub, "probes"), 1),
                          **{f"claims: {verdict}": n for verdict, n in pub["scorecard"]["counts"].items()}}
                         for name, pub in published.items()])


def overview_by_profile(published: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """`overview` turned on its side, as section 07 shows it: a row per quantity and a column per profile, so the
    table is as wide as there are profiles, not as there are quantities."""
    found = overview(published)
    return found.set_index("profile").T.rename_axis("profile").rename_axis(None, axis=1) if len(found) else found


def markdown(published: dict[str, dict[str, Any]]) -> str:
    """The scorecard of every published profile, each with where and when it ran, for the book."""
    if not published:
        return "No other profile's run is published yet (`python -m twotower_lib publish --profile NAME`).\n"
    parts = []
    for name, pub in published.items():
        prov = pub["provenance"]
        parts.append(f"### Profile `{name}`\n\n"
                     f"Published {prov['created'][:10]} from code version `{str(prov['code_version'])[:12]}` "
                     f"({machine(prov)}, {prov['platform']}, Python {prov['python']}); the last execution of each of its sections "
                     f"took {pub['section_seconds'] / 60:.0f} min in all (a section that resumed counts only its "
                     f"last part) and its {len(pub['training'])} training runs "
                     f"took {run_minutes(pub, 'training'):.0f} run-minutes"
                     + (f", its {len(pub['probes'])} probes {run_minutes(pub, 'probes'):.0f} probe-minutes" if pub.get("probes") else "")
                     + (f", with `-p` {pub['overrides']}" if pub["overrides"] else "")
                     + f". {probe_note(pub)} Regenerate: `python -m twotower_lib run --profile {name}` then "
                     f"`python -m twotower_lib publish --profile {name}`.{earlier_rules(pub)}\n\n"
                     + scorecard.to_markdown(pub["scorecard"]))
    return "\n".join(parts)


def earlier_rules(pub: dict[str, Any]) -> str:
    """A sentence where a published run recorded its verdicts by rules that have changed since
    (`paper.RUN_RULES_EDITION`): its scorecard shows the verdicts it recorded then, which today's rules might not
    give (empty where current: later editions changed only verdicts over seed pairs, decided anew when shown)."""
    edition = pub.get("rules", 1)
    if edition >= paper.RUN_RULES_EDITION:
        return ""
    signed = "its correlation verdicts and Table 3" if edition < 2 else "its Table 3 verdict"
    return (f" **Judged by the rules' edition {edition}** (today's: {paper.RULES_EDITION}; the changelog says what "
            f"changed): {signed} judged the signed r or rho, which today's rules read as |r|, so its scorecard below "
            "is a record, not today's judgement"
            + ("; section 07's table re-judges its same-configuration pairs by today's rule" if edition < 2 else "")
            + ". Re-running the profile brings it up to date.")


# ---------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES),
                   help=f"whose finished run to publish (default {DEFAULT_PROFILE})")
    p.add_argument("-p", "--parameter", nargs="+", action="append", default=[], metavar="KEY[=VALUE]",
                   help="the -p overrides the run was made with, if any")
    p.add_argument("--runs-dir", default=None, help="where runs/<profile>/ lives (default $TWOTOWER_RUNS, else the project's runs/)")
    p.add_argument("--results", type=Path, default=RESULTS_DIR, help=f"where to write <profile>.json (default {RESULTS_DIR})")
    p.add_argument("--readme", action="store_true",
                   help="instead: regenerate README.md's verdict table (from the published default profile and its seed study) and "
                        "its GPU-hours (from results/gpu/book.json)")


def update_readme() -> int:
    """`--readme`: rewrite the README's generated blocks (`front.readme_blocks`)."""
    from twotower_lib.book import front
    from twotower_lib.book.sections import PROJECT_ROOT

    changed = front.update_readme(PROJECT_ROOT / "README.md")
    print("README.md: generated blocks " + ("regenerated" if changed else "already up to date"))
    return 0


def main(args: argparse.Namespace) -> int:
    if args.readme:
        return update_readme()
    pipe = make_pipeline(args.profile, parse_overrides(args.parameter), args.runs_dir)
    path = publish(pipe, args.results)
    pub = read_json(path)
    print(f"published {path} ({path.stat().st_size / 1e3:.1f} kB): "
          + ", ".join(f"{n} {v}" for v, n in pub["scorecard"]["counts"].items())
          + f"; sections ran {pub['section_seconds'] / 60:.1f} min")
    from twotower_lib.book import study_parts

    for line in study_parts.stale():  # the studies' book parts read from published files
        print(f"now stale: {line}")
    return 0
