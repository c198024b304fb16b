"""`python -m twotower_lib book`: build the jupyter-book from a profile's executed notebooks.

The book's sources are assembled in `_build/src/`, never in the repository: the root
`_config.yml` and `_toc.yml`, the pages of `book/` (with their generated parts filled in: the
scorecard from `runs/<profile>/scorecard.json`, the profile table, one autodoc section per
module), the executed notebooks from `runs/<profile>/notebooks/` at `notebooks/<section>.ipynb`,
and the vega bundle the charts load. Then `jupyter-book build -W -n --keep-going` turns every
warning, broken reference or failed notebook into a failed build. Files are copied only when
their content changed, so Sphinx's incremental build keeps a warm rebuild fast.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from twotower_lib.book import charts, render, scorecard
from twotower_lib.book.tables import breakable
from twotower_lib.book.pipeline import Pipeline, make_pipeline
from twotower_lib.book.profile_keys import OVERRIDABLE
from twotower_lib.book.profiles import DEFAULT_PROFILE, PROFILES, runs_root
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.errors import MissingDependencyError, UserError

PAGES_DIR = PROJECT_ROOT / "book"
LIBRARY_PARENT = Path(__file__).resolve().parents[2]  # the directory that holds twotower_lib/
READER_CSS = Path(__file__).with_name("twotower.css")  # the reader's stylesheet: what wraps, what folds, what spans
_PLACEHOLDER = re.compile(r"<!-- ([A-Z][A-Z0-9_]*): .*?-->", re.DOTALL)


def _sync(data: bytes, dest: Path) -> None:
    """Write `data` to `dest` unless it already holds exactly that (keeps mtimes for Sphinx)."""
    if dest.exists() and dest.read_bytes() == data:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)


# ---------------------------------------------------------------------- generated page parts


def profiles_markdown() -> str:
    """Every profile: what it is for, then a table of the settings that differ between profiles (one row
    per "section.field", one column per profile), generated from twotower_lib.book.profiles."""
    def cell(v) -> str:   # a value as typed after `-p KEY` is code, breaking only after _ / + @ or a hyphen
        if isinstance(v, list):
            return ", ".join(f"<code>{breakable(x)}</code>" for x in v) or "—"
        if isinstance(v, str):
            return f"<code>{breakable(v)}</code>"
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else "—" if v is None else str(v)

    values = {p.name: p.values() for p in PROFILES.values()}
    keys = [k for k in OVERRIDABLE if len({repr(v[k]) for v in values.values()}) > 1]
    lines = [f"- **{p.name}**: {p.description}" for p in PROFILES.values()] + [""]
    lines += ["| setting | " + " | ".join(f"`{n}`" for n in values) + " |", "|---|" + "---|" * len(values)]
    key = lambda k: ('<code style="word-break:normal;overflow-wrap:normal">'   # breaks after . and _ only, never mid-word
                     + k.replace(".", ".<wbr>").replace("_", "_<wbr>") + "</code>")
    lines += [f"| {key(k)} | " + " | ".join(cell(v[k]) for v in values.values()) + " |" for k in keys]
    return "\n".join(lines) + "\n"


def api_markdown() -> str:
    """One autodoc section per module of twotower_lib (found from the files, without importing)."""
    package = Path(__file__).resolve().parents[1]
    names = sorted(".".join(("twotower_lib", *p.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
                   for p in package.rglob("*.py") if p.name != "__main__.py")
    return "\n".join(f"## `{name}`\n\n```{{eval-rst}}\n.. automodule:: {name}\n```\n" for name in names)


def picture_markdown(card: dict) -> str:
    """The scorecard's picture (`charts.paper_vs_ours`) as a raw-HTML block: the offline chart over its PNG."""
    import pandas as pd

    if not card.get("points"):
        return "*No correlation the paper reports was measured at this profile.*\n"
    return chart_markdown(charts.paper_vs_ours(pd.DataFrame(card["points"])))


def chart_markdown(chart) -> str:
    """An altair chart (or its Vega-Lite spec: a study's `*_CHART` part) as a raw-HTML block: the offline
    chart over its PNG."""
    spec = chart if isinstance(chart, dict) else chart.to_dict()
    return "```{raw} html\n" + render.mimebundle(spec)["text/html"] + "\n```\n"


def execution_markdown(pipe: Pipeline) -> str:
    """The execution statistics of the build's run: each chapter's last run, profile, duration, status and code
    version (`Pipeline.executions`), with the total; then what the training and probing that the chapters read took
    when it was made (each run's own wall time, as a published run reports it), since a chapter's last execution
    reads the runs and probes an earlier one made instead of making them again."""
    from twotower_lib.book.publish import probe_runs, run_minutes, training_runs
    from twotower_lib.book.tables import markdown_table

    rows = pipe.executions()
    total = sum(r["seconds"] or 0 for r in rows)
    table = markdown_table(["chapter", "profile", "last run (UTC)", "duration", "status", "code version"],
                           ([r["section"], r["profile"], r["last run"].replace("T", " "),
                             "—" if r["seconds"] is None else f"{r['seconds']:,.0f} s", r["status"], r["code version"]]
                            for r in rows))
    made = {"training": training_runs(pipe), "probes": probe_runs(pipe)}
    work = (f" The chapters read {len(made['training'])} training runs, which took "
            f"{run_minutes(made, 'training'):,.1f} run-minutes when they were made, and {len(made['probes'])} probes, "
            f"{run_minutes(made, 'probes'):,.1f} probe-minutes (each its own wall time, summed over resumes); a "
            "chapter's last execution reads them rather than making them again.")
    return table + f"\n*{len(rows)} chapters, {total / 60:,.1f} minutes of section time in all.*{work}\n"


def fill_placeholders(text: str, card: dict, pipe: Pipeline | None = None) -> str:
    """Replace every `<!-- NAME: replaced by ... -->` of a book page with what it names, computed from
    the run's scorecard, its pipeline's records (`pipe`) and from results/; an unknown name is an error."""
    from twotower_lib.paper import CONTEXT_RULE, CONTROLS_RULE, FIG5_RULE, FIG6_RULE, ONE_RUN_RULE, RULE, TABLE3_RULE
    from twotower_lib.book import front, publish, study_parts

    parts = {"PROFILES": profiles_markdown, "SCORECARD": lambda: scorecard.to_markdown(card), "API": api_markdown,
             "ANSWER": lambda: front.verdict_markdown(card), "HEADLINE": lambda: front.headline_markdown(card), "LEAD": lambda: chart_markdown(front.lead_chart(card)) + "\n" + front.LEAD_KEY + "\n",
             "SPREAD": lambda: front.spread_sentence(card["profile"]),
             "RULE": lambda: f"{CONTEXT_RULE}\n\n{RULE} {CONTROLS_RULE}", "ONE_RUN_RULE": lambda: f"{ONE_RUN_RULE}\n\n{FIG5_RULE}\n\n{FIG6_RULE}\n\n{TABLE3_RULE}", "PICTURE": lambda: picture_markdown(card),
             "PUBLISHED": lambda: publish.markdown(publish.load_published(exclude=card["profile"])),
             "EXECUTION": lambda: execution_markdown(pipe) if pipe is not None else "*No pipeline run to report.*\n",
             }
    studied, studied_numbers = study_parts.load(profile=card["profile"])
    parts.update({name: (lambda name=name, text=text: chart_markdown(json.loads(text))
                         if name.endswith("_CHART") and text.startswith("{") else text)
                  for name, text in studied.items()})
    unknown = sorted(set(_PLACEHOLDER.findall(text)) - set(parts))
    if unknown:
        raise UserError(f"book page placeholder(s) {unknown} are not known; known: {', '.join(parts)}")
    text = _PLACEHOLDER.sub(lambda m: parts[m.group(1)](), text)
    return fill_numbers(text, studied_numbers)


NUMBER_KEY = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def fill_numbers(text: str, values: dict[str, str]) -> str:
    """`text` with every `{{ key }}` replaced by a study's number (`study_parts`); a clear error naming any
    key no study gives."""
    missing = sorted({m.group(1) for m in NUMBER_KEY.finditer(text)} - set(values))
    if missing:
        raise UserError(f"a book page names numbers that no study computes: {', '.join(missing)}; add them to a "
                        "study's results/<study>/book.json (e.g. studies/decisions/report.py) or fix the page")
    return NUMBER_KEY.sub(lambda m: values[m.group(1)], text)


# ---------------------------------------------------------------------- assembling and building


def check_executed(path: Path, section: str) -> None:
    """A notebook that raised must not become a chapter."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                raise UserError(f"the executed notebook of {section} ({path}) contains an error "
                                f"({out.get('ename')}: {out.get('evalue')}); re-run it with "
                                f"`python -m twotower_lib run {section}` and fix what fails")


def local_paths(runs: Path, corpus: str = "") -> list[tuple[str, str]]:
    """(local prefix, what a reader sees instead), longest first: the runs directory, the folder of
    a local corpus file, the checkout, the Python installation and the home directory."""
    runs_label = "runs" if runs.resolve() == (PROJECT_ROOT / "runs").resolve() else "$TWOTOWER_RUNS"
    pairs = {str(runs.resolve()): runs_label, str(PROJECT_ROOT): ".", sys.prefix: "<python>",
             sys.base_prefix: "<python>", str(Path.home()): "~"}
    if corpus and ":" not in corpus.split("/", 1)[0]:  # a path, not "registry:brown" or "hf:bookcorpus"
        pairs[str(Path(corpus).expanduser().resolve().parent)] = "<corpus folder>"
    return sorted(((k, v) for k, v in pairs.items() if len(k) > 1), key=lambda kv: -len(kv[0]))


def for_readers(executed: Path, runs: Path, corpus: str = "") -> str:
    """An executed notebook as the book shows it: no local path in any source or text output
    (`local_paths`), papermill's injected-parameters cell collapsed and the parameters cell's source folded, each
    under a label that says what it holds (the parameter table at the top of each section lists the values; the
    folded cell still shows what a reader may pass)."""
    nb = nbformat.read(executed, as_version=4)
    prefixes = local_paths(runs, corpus)

    def clean(text):
        if isinstance(text, list):
            return [clean(t) for t in text]
        if not isinstance(text, str):
            return text
        for local, shown in prefixes:
            text = text.replace(local, shown)
        return text

    for cell in nb.cells:
        cell.source = clean(cell.source)
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "hide-cell" not in tags:
            tags.append("hide-cell")
            cell.metadata.setdefault("mystnb", {}).setdefault("code_prompt_show", "The parameters this build ran with")
        if "parameters" in tags and "hide-input" not in tags:
            tags.append("hide-input")
            cell.metadata.setdefault("mystnb", {}).setdefault("code_prompt_show", "The parameters a re-run may set")
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = clean(out["text"])
            for mime in list(out.get("data", {})):
                if mime.startswith("text/"):
                    out["data"][mime] = clean(out["data"][mime])
            if "traceback" in out:
                out["traceback"] = clean(out["traceback"])
    return nbformat.writes(nb)


def assemble(pipe: Pipeline, stage: Path) -> list[str]:
    """Put the book's sources for `pipe`'s profile in `stage`; return the chapters' section names."""
    chapters = []
    for s in pipe.sections:
        executed = pipe.executed(s)
        if not executed.exists():
            raise UserError(f"section {s.name} has not been run at profile {pipe.profile.name!r} "
                            f"(no {executed}). Run it first:  python -m twotower_lib run --profile "
                            f"{pipe.profile.name}" + (f" --runs-dir {pipe.root.parent}" if pipe.root.parent != runs_root() else ""))
        check_executed(executed, s.name)
        _sync(for_readers(executed, pipe.root.parent, pipe.profile.data.corpus).encode("utf-8"), stage / "notebooks" / f"{s.name}.ipynb")
        chapters.append(s.name)
    card = scorecard.write(pipe.root, pipe.sections)
    from twotower_lib.book import study_parts

    if stale := study_parts.stale():
        raise UserError("a study's book parts, or a published scorecard, are older than the committed results they "
                        "show; rewrite them first: "
                         + "; ".join(stale))
    for name in ("_config.yml", "_toc.yml"):
        _sync((PROJECT_ROOT / name).read_bytes(), stage / name)
    for src in sorted(PAGES_DIR.rglob("*")):
        if src.is_file():
            data = src.read_bytes()
            if src.suffix == ".md":
                data = fill_placeholders(data.decode("utf-8"), card, pipe).encode("utf-8")
            _sync(data, stage / "book" / src.relative_to(PAGES_DIR))
    render.write_bundle(stage / "_static")
    _sync(READER_CSS.read_bytes(), stage / "_static" / "twotower.css")  # jupyter-book links every _static/*.css
    return chapters


def jupyter_book_command() -> list[str]:
    exe = Path(sys.executable).parent / "jupyter-book"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("jupyter-book")
    if not found:
        raise MissingDependencyError("building the book needs jupyter-book 1.x: pip install 'twotower_lib[book]'")
    return [found]


def build(pipe: Pipeline, build_root: Path = PROJECT_ROOT) -> Path:
    """Assemble and build the book into `build_root/_build/html`; return that directory."""
    stage = build_root / "_build" / "src"
    chapters = assemble(pipe, stage)
    cmd = [*jupyter_book_command(), "build", str(stage), "--path-output", str(build_root),
           "-W", "-n", "--keep-going"]
    # The book's Sphinx extension is `twotower_lib.book.build`: make jupyter-book import this very copy of
    # the library (the one that assembled the pages), installed or not.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(LIBRARY_PARENT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        log = build_root / "_build" / "build.log"
        log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
        problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                    if "WARNING" in line or "ERROR" in line or "Error" in line][:20]
        raise UserError("the book build failed (warnings are errors):\n  " + "\n  ".join(problems or ["(see log)"])
                        + f"\nFull log: {log}")
    html = build_root / "_build" / "html"
    if not (html / "index.html").exists():
        raise UserError(f"jupyter-book reported success but wrote no {html / 'index.html'}")
    print(f"book: {len(chapters)} chapter(s) from runs of profile {pipe.profile.name!r}: {', '.join(chapters)}")
    return html


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------- Sphinx extension


def _docstring_as_rst(app, what, name, obj, options, lines: list[str]) -> None:
    """Make a Markdown-flavoured docstring safe for reStructuredText.

    The library's docstrings are written to be read in the source (`code` in single backticks,
    lists without blank lines around them). Single backticks become literals; if the result still
    does not parse cleanly as reStructuredText, the docstring is shown verbatim as a literal block
    rather than breaking the warnings-as-errors build.
    """
    import io

    import docutils.core

    text = re.sub(r"(?<![`:\w])`([^`\n]+)`(?![`_\w])", r"``\1``", "\n".join(lines))
    problems = io.StringIO()
    try:
        docutils.core.publish_doctree(text, settings_overrides={
            "report_level": 2, "halt_level": 5, "warning_stream": problems})  # 2: warnings and worse
        clean = not problems.getvalue()
    except Exception:  # docutils may raise on pathological input; the fallback is always safe
        clean = False
    if clean:
        lines[:] = text.split("\n")
    else:
        lines[:] = ["::", ""] + [f"    {line}" for line in lines] + [""]


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree) -> None:
    """Under jupyter-book 1.x, sphinx-thebe adds its inline configuration twice (with filename None
    and ""); the second `const THEBE_JS_URL = ...` is a SyntaxError on every page. Keep each once."""
    seen, unique = set(), []
    for js in context.get("script_files", []):
        key = (getattr(js, "filename", str(js)) or "", repr(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def setup(app) -> dict:
    """Sphinx entry point (listed in _config.yml): docstring clean-up for autodoc, script de-duplication."""
    app.connect("autodoc-process-docstring", _docstring_as_rst)
    app.connect("html-page-context", _drop_duplicate_scripts)
    return {"parallel_read_safe": True}


# ---------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES),
                   help=f"whose executed notebooks become the chapters (default {DEFAULT_PROFILE})")
    p.add_argument("--runs-dir", default=None, help="where runs/<profile>/ lives (default $TWOTOWER_RUNS, else the project's runs/)")
    p.add_argument("--out", type=Path, default=PROJECT_ROOT,
                   help="the book goes to OUT/_build/html (default: the repository root)")


def main(args: argparse.Namespace) -> int:
    t0 = time.time()
    html = build(make_pipeline(args.profile, runs_dir=args.runs_dir), Path(args.out).resolve())
    print(f"built {html} ({tree_size(html) / 1e6:.1f} MB) in {time.time() - t0:.1f} s; "
          f"view it with: python -m http.server --directory {html} 8000")
    return 0
