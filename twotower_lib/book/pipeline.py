"""The book's sections in order, run with papermill, re-run only when something they read changed.

Each section is a jupytext percent-format notebook `notebooks/<name>.py` (`sections.SECTIONS`).
`run` converts it in memory, executes it with papermill and writes the executed copy to
`runs/<profile>/notebooks/<name>.ipynb` (never into a jupytext-paired file, so the source stays
clean). A section re-runs only when its parameters, its source, an upstream section's output, the committed
results it reads or the library's code changed; each run leaves a record in `runs/<profile>/.pipeline/<name>.json`
saying what it read.
What a running notebook calls lives in `sections`, `training`, `probing` and `analyses`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from twotower_lib.artifacts import atomic_write_json, provenance, read_json, sha256_file, sha256_json
from twotower_lib.book.profile_keys import OVERRIDABLE, canonical_key, notebook_name
from twotower_lib.book.profiles import DEFAULT_PROFILE, PROFILES, Profile, get_profile, profile_dir
from twotower_lib.book.sections import NOTEBOOKS_DIR, PROJECT_ROOT, SECTIONS, Section, as_text, find_section
from twotower_lib.errors import UserError


DEFAULT_JOBS = 2   # sections side by side (`run`'s --jobs): the analysis sections are mostly kernel start and imports


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


LIBRARY_CODE = Path(__file__).resolve().parents[1]   # twotower_lib/: what every section's library calls run


@dataclass
class Pipeline:
    """The sections of one profile: where their sources, outputs and records are."""

    profile: Profile
    root: Path                                   # runs/<profile>/
    overrides: dict[str, Any] = field(default_factory=dict)
    notebooks_dir: Path = field(default_factory=lambda: NOTEBOOKS_DIR)  # (a factory: no local path in the API page)
    sections: tuple[Section, ...] = SECTIONS
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # the hash cache, across sections run side by side

    def source(self, s: Section) -> Path:
        return self.notebooks_dir / f"{s.name}.py"

    def executed(self, s: Section) -> Path:
        return self.root / "notebooks" / f"{s.name}.ipynb"

    def record_path(self, s: Section) -> Path:
        return self.root / ".pipeline" / f"{s.name}.json"

    def __post_init__(self) -> None:
        missing = [str(self.source(s)) for s in self.sections if not self.source(s).exists()]
        if missing:
            raise UserError(f"the section notebook(s) {', '.join(missing)} are missing; every section of "
                            f"twotower_lib.book.sections needs its notebook (restore it with  git checkout -- notebooks/)")

    def plan(self, target: str | None) -> list[Section]:
        """`target` and every section it depends on, in book order (every section if None)."""
        if target is None:
            return list(self.sections)
        wanted: set[str] = set()
        stack = [find_section(target, self.sections).name]
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(find_section(name, self.sections).upstream)
        return [s for s in self.sections if s.name in wanted]

    def inputs(self, s: Section, hashes: _Hashes) -> dict[str, Any]:
        """Everything a section's result depends on: its source, its parameters, its inputs' outputs, the committed
        results it reads and the library's code."""
        values = self.profile.values()
        return {
            "source": sha256_file(self.source(s)),
            "parameters": {k: values[k] for k in s.parameters},
            "upstream": {u: hashes.directory(self.root / find_section(u, self.sections).output) for u in s.upstream},
            # a profile's own published run (publish.py, results/profiles/<profile>.json) is not an input of its
            # sections: publishing must not make them stale. A run published elsewhere (results/bert-controls/) is.
            # A study's README says how its files were made; it is read by people, not by a section.
            "committed": {c: hashes.files(PROJECT_ROOT / c, exclude=("README.md", *((f"{self.profile.name}.json",)
                                                                                 if Path(c).name == "profiles" else ())))
                          for c in s.committed},
            # what its library calls compute and how its page renders them: a chapter made by older code is not up
            # to date (re-run, its calls redo only what their own identity says changed: a probe its version, a run
            # its config)
            "library": sha256_json([[p.relative_to(LIBRARY_CODE).as_posix(), hashes.file(p)]
                                    for p in sorted(LIBRARY_CODE.rglob("*.py"))]),
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
        if rec.get("library") != now["library"]:
            return "the library's code changed"
        if rec.get("committed", {}) != now["committed"]:
            changed = [c for c in now["committed"] if rec.get("committed", {}).get(c) != now["committed"][c]]
            return f"the committed results in {', '.join(changed)} changed"
        if not self.executed(s).exists():
            return "its executed notebook is missing"
        if rec.get("output") != hashes.directory(self.root / s.output):
            return f"its output in {self.root / s.output} was changed or removed"
        return None

    def stale(self) -> dict[str, str]:
        """Every section that is not up to date at this profile, with the reason."""
        hashes = _Hashes(self.root / ".pipeline" / "hashes.json")
        return {s.name: reason for s in self.sections if (reason := self.why_stale(s, hashes))}

    def executions(self) -> list[dict]:
        """Each section's last run at this profile, as its record says: when, how long, with which code, and
        whether it is up to date now (or why not, or that its last run failed)."""
        stale = self.stale()
        rows = []
        for s in self.sections:
            record = read_json(self.record_path(s)) if self.record_path(s).exists() else {}
            prov = record.get("provenance", {})
            failed = (self.root / "notebooks" / f"{s.name}.failed.ipynb").exists()
            status = ("failed" if failed and s.name in stale else f"stale: {stale[s.name]}" if s.name in stale
                      else "up to date")
            rows.append({"section": s.name, "profile": self.profile.name, "last run": prov.get("created", "never")[:19],
                         "seconds": record.get("seconds"), "status": status,
                         "code version": prov.get("code_version", "—")[:12]})
        return rows

    def execute(self, s: Section, log: Callable[[str], None] = print, progress: bool = True) -> None:
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
        with self._lock:
            inputs = self.inputs(s, _Hashes(self.root / ".pipeline" / "hashes.json"))
        jupytext.write(jupytext.read(self.source(s)), source_nb, fmt="ipynb")
        # Every parameter explicitly, not only the overridden ones: a default edited and saved in the
        # notebook must not change what runs here (the run record names these values).
        params: dict[str, Any] = {"profile": self.profile.name, "runs_dir": str(self.root.parent)}
        params.update({notebook_name(k): as_text(v) if isinstance(v, list) else v
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
        with self._lock:
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

    def run(self, target: str | None = None, force: bool = False, log: Callable[[str], None] = print,
            jobs: int = 1) -> list[str]:
        """Run what is stale among `target` and its upstream sections; return the names that ran.

        `jobs`: how many sections may run side by side once their upstream sections are done (each is
        its own kernel). Only the analysis sections (03-06, after probing) are independent of each
        other; most of their time is a kernel start and imports, so two at a time shorten a run on
        two cores. A section is checked for staleness when its upstream sections have finished."""
        if not isinstance(jobs, int) or jobs < 1:
            raise UserError(f"jobs = {jobs!r}: the number of sections run side by side must be a positive integer")
        plan = self.plan(target)
        unread = sorted(set(self.overrides) - {p for s in plan for p in s.parameters})
        if unread:
            readers = {k: [s.name for s in self.sections if k in s.parameters] for k in unread}
            raise UserError(f"parameter(s) {unread} are not read by the section(s) being run "
                            f"({', '.join(s.name for s in plan)}); they belong to {readers}"
                            + ("" if target is None else ": run that section instead"))
        names = {s.name for s in plan}
        waiting, running, done, ran = list(plan), {}, set(), []
        failure: BaseException | None = None
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            while (waiting and failure is None) or running:
                ready = [s for s in waiting if all(u in done for u in s.upstream if u in names)] if failure is None else []
                for s in ready[:jobs - len(running)]:
                    waiting.remove(s)
                    with self._lock:
                        hashes = _Hashes(self.root / ".pipeline" / "hashes.json")
                        reason = "--force" if force else self.why_stale(s, hashes)
                        hashes.save()
                    if reason is None:
                        log(f"{s.name}: up to date (source, parameters and inputs unchanged)")
                        done.add(s.name)
                        continue
                    log(f"{s.name}: running ({reason})")
                    running[pool.submit(self.execute, s, log, jobs == 1)] = s
                if not running:
                    continue                   # sections found up to date may have made others ready
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    s = running.pop(future)
                    try:
                        future.result()
                    except BaseException as e:     # the sections already running finish; none starts
                        failure = failure or e
                    else:
                        done.add(s.name)
                        ran.append(s.name)
        if failure is not None:
            raise failure
        return [s.name for s in plan if s.name in ran]


def make_pipeline(profile: str = DEFAULT_PROFILE, overrides: dict[str, Any] | None = None,
                  runs_dir: str | Path | None = None, **kw: Any) -> Pipeline:
    """A Pipeline for `profile` with `-p` overrides validated up front (UserError on any bad one)."""
    keys = {canonical_key(k): v for k, v in (overrides or {}).items()}
    prof = get_profile(profile).with_overrides(keys)
    return Pipeline(prof, profile_dir(prof.name, runs_dir), {k: prof.value(k) for k in keys}, **kw)


def parse_overrides(pairs: list[list[str]]) -> dict[str, str]:
    """`-p KEY VALUE` or `-p KEY=VALUE` arguments as a dict (UserError if a key is given twice or an
    argument is neither form)."""
    overrides: dict[str, str] = {}
    for words in pairs:
        if len(words) == 1 and "=" in words[0]:
            words = words[0].split("=", 1)
        if len(words) != 2:
            raise UserError(f"-p {' '.join(words)}: write -p KEY VALUE or -p KEY=VALUE (e.g. -p probe.train_positions=400000)")
        key, value = words
        if key in overrides:
            raise UserError(f"-p {key} is given twice")
        overrides[key] = value
    return overrides


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("section", nargs="?", default=None,
                   help="run this section and what it needs (e.g. 00_data or data); default: all")
    p.add_argument("--profile", default=DEFAULT_PROFILE, choices=list(PROFILES),
                   help=f"settings bundle (default {DEFAULT_PROFILE}); see twotower_lib.book.profiles")
    p.add_argument("-p", "--parameter", nargs="+", action="append", default=[], metavar="KEY[=VALUE]",
                   help="override one profile field for this run: -p KEY VALUE or -p KEY=VALUE, KEY as section.field "
                        f"(e.g. probe.train_positions, analysis.top_n); keys: {', '.join(OVERRIDABLE)}")
    p.add_argument("--runs-dir", default=None, help="where runs/<profile>/ lives (default $TWOTOWER_RUNS, else the project's runs/)")
    p.add_argument("--force", action="store_true", help="re-run even what is up to date")
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                   help=f"sections run side by side once their inputs are ready (default {DEFAULT_JOBS}: the analysis sections pair up)")


def main(args: argparse.Namespace) -> int:
    from twotower_lib.book import scorecard

    pipe = make_pipeline(args.profile, parse_overrides(args.parameter), args.runs_dir)
    t0 = time.time()
    pipe.run(args.section, force=args.force, jobs=args.jobs)
    card = scorecard.write(pipe.root, pipe.sections)
    print(f"scorecard: {pipe.root / 'scorecard.json'} ("
          + ", ".join(f"{n} {v}" for v, n in card["counts"].items()) + ")")
    print(f"finished in {time.time() - t0:.1f} s; build the book with: python -m twotower_lib book --profile {args.profile}"
          + (f" --runs-dir {args.runs_dir}" if args.runs_dir else ""), file=sys.stderr)
    return 0
