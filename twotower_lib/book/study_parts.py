"""What the committed studies give the book, as files: each study's report writes
`results/<study>/book.json`, holding the Markdown of the page parts it owns (a page's
`<!-- NAME: ... -->` placeholder, e.g. `GPU_BENCH`, or a part a chapter shows with `part`), the numbers
of its prose (`{{ key }}`) and the scorecard verdicts it decides (`verdict`), with the hashes of the
result files they were made from. The book fills its pages from those files, so the
library never imports a study, and a part whose results changed since it was written is stale
(`stale`): the book build refuses it and names the command that rewrites it.

A part or verdict measured at one profile is named `NAME@<profile>` (the seed study's): the book built at
that profile shows it as `NAME`, a book built at another says where it was measured.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from twotower_lib import paper
from twotower_lib.artifacts import atomic_write_json, provenance, read_json, sha256_file
from twotower_lib.book.sections import PROJECT_ROOT
from twotower_lib.errors import UserError

RESULTS = PROJECT_ROOT / "results"
FILE = "book.json"


def write(folder: Path, parts: dict[str, str], numbers: dict[str, str], inputs: list[Path], command: str,
          verdicts: dict[str, dict] | None = None) -> Path:
    """Write a study's `book.json` into `folder` (its results folder): `parts` by placeholder name, `numbers`
    by key, `verdicts` by scorecard item (profile, ours, verdict, note) with the rules' edition that decided
    them (`paper.RULES_EDITION`), and the sha256 of every input
    (paths relative to the project) it was computed from. An input may be a pattern (`profiles/*.json`):
    its digest covers the names and contents of the files it matches, so a file added there makes the
    parts stale too."""
    hashes = {_relative(p): _digest(p) for p in sorted(inputs)}
    missing = [name for name, digest in hashes.items() if digest is None]
    if missing:
        raise UserError(f"the book parts of {folder} are computed from files that do not exist: {missing}")
    path = folder / FILE
    atomic_write_json(path, {"command": command, "parts": parts, "numbers": numbers, "verdicts": verdicts or {},
                             "rules": paper.RULES_EDITION, "inputs": hashes, "provenance": provenance()})
    return path


def _relative(path: Path) -> str:
    path = path.parent.resolve() / path.name
    return path.relative_to(PROJECT_ROOT).as_posix() if path.is_relative_to(PROJECT_ROOT) else str(path)


def _digest(path: Path) -> str | None:
    """The sha256 of a file, or of a pattern's files (their names and digests; a study's own `book.json` is
    never its input); None where nothing is there."""
    if "*" in path.name:
        files = sorted(path.parent.glob(path.name))
        listing = "".join(f"{f.name} {sha256_file(f)}\n" for f in files if f.is_file() and f.name != FILE)
        return hashlib.sha256(listing.encode()).hexdigest() if listing else None
    return sha256_file(path) if path.is_file() else None


def stale(results: Path = RESULTS) -> list[str]:
    """Every study's `book.json` whose inputs changed (or vanished, or a pattern's files came or went) since
    it was written, with the command that rewrites it."""
    out = []
    for path in sorted(results.glob(f"*/{FILE}")):
        found = read_json(path)
        root = results.parent
        changed = [name for name, digest in found.get("inputs", {}).items() if _digest(root / name) != digest]
        if changed:
            out.append(f"{path.relative_to(root)} (from {', '.join(changed)}): run `{found.get('command', '?')}`")
    return out + published_behind(results)


def published_behind(results: Path = RESULTS) -> list[str]:
    """Each published profile's scorecard row (`results/profiles/`) that a study decides but whose verdict or
    text is no longer the study's: the README and the other profiles' pages would say one thing, the study
    another. Rows decided over seeds are decided anew wherever a record is shown (`scorecard.redecided`), so only
    the others can fall behind."""
    decided = {key: (path, v) for path in sorted(results.glob(f"*/{FILE}"))
               for key, v in read_json(path).get("verdicts", {}).items()}
    out = []
    for record in sorted((results / "profiles").glob("*.json")):
        profile = record.stem
        for row in read_json(record)["scorecard"]["rows"]:
            path, v = decided.get(f"{row['id']}@{profile}") or decided.get(row["id"]) or (None, None)
            if v is None or v.get("profile", profile) != profile or "seeds" in v:
                continue
            if row["verdict"] != v["verdict"] or not str(row["ours"]).startswith(v.get("ours", "")):
                out.append(f"{record.relative_to(results.parent)}: its {row['id']!r} row is not "
                           f"{path.relative_to(results.parent)}'s now: run `python -m twotower_lib run --profile "
                           f"{profile}`, then `python -m twotower_lib publish --profile {profile}`")
    return out


def load(results: Path = RESULTS, profile: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Every committed study's page parts and prose numbers; a name two studies both claim is an error.
    With `profile`, a part `NAME@<profile>` is given as `NAME`, and a `NAME` measured only at other profiles
    as a line saying so."""
    parts: dict[str, str] = {}
    numbers: dict[str, str] = {}
    owner: dict[str, Path] = {}
    elsewhere: dict[str, list[str]] = {}
    for path in sorted(results.glob(f"*/{FILE}")):
        found = read_json(path)
        for kind, into in (("parts", parts), ("numbers", numbers)):
            for name, value in found.get(kind, {}).items():
                if name in owner:
                    raise UserError(f"{path} and {owner[name]} both give the book's {name!r}")
                owner[name] = path
                base, _, at = name.partition("@")
                if profile is None or not at:
                    into[name] = value
                elif at == profile:
                    into[base] = value
                else:
                    elsewhere.setdefault(base, []).append(at)
    for base, profiles in elsewhere.items():
        parts.setdefault(base, f"*Not measured at profile `{profile}`: committed for {', '.join(f'`{p}`' for p in profiles)} "
                               f"only (`{_relative(owner[f'{base}@{profiles[0]}'])}`).*")
    return parts, numbers


def part(name: str, profile: str | None = None, results: Path = RESULTS) -> str:
    """One committed page part by name (a chapter shows it), at `profile` where it is measured per profile,
    or a line saying which study has not written it."""
    parts, _ = load(results, profile)
    return parts.get(name, f"*Not committed yet: no study's results/<study>/{FILE} gives {name!r}.*")


def show(name: str, profile: str | None = None, results: Path = RESULTS):
    """A part as a chapter displays it: a chart (`*_CHART`, Vega-Lite JSON) drawn offline, a reader table
    (HTML) as HTML, the rest — a Markdown table across the margin (`tables.full_width`) and the line saying where a
    part is missing among them — as Markdown."""
    from IPython.display import HTML, Markdown

    from twotower_lib.book.render import SavedChart
    from twotower_lib.book.tables import FULL_WIDTH

    text = part(name, profile, results)
    if name.endswith("_CHART") and text.lstrip().startswith("{"):
        return SavedChart(text)
    html = text.lstrip().startswith("<") and not text.lstrip().startswith(FULL_WIDTH)
    return HTML(text) if html else Markdown(text)


def verdict(item: str, profile: str | None = None, results: Path = RESULTS) -> dict | None:
    """The scorecard verdict a study decides for `item` (profile, ours, verdict, note) — at `profile`, where
    the study decides it per profile (`item@profile`) — or None. A verdict decided by another edition of the
    rules than today's is refused, with the command that decides it again."""
    key = item if profile is None else f"{item}@{profile}"
    for path in sorted(results.glob(f"*/{FILE}")):
        found = read_json(path)
        if key in found.get("verdicts", {}):
            if found.get("rules", 1) != paper.RULES_EDITION:
                raise UserError(f"{path}'s verdicts were decided by the rules' edition {found.get('rules', 1)}, "
                                f"today's is {paper.RULES_EDITION}: run `{found.get('command', '?')}`")
            return found["verdicts"][key]
    return None
