"""Mutation testing of the science core: do the tests notice when a number the code computes changes?

    python benchmarks/mutation.py [--modules seed_spread,correlation] [--jobs 2] [--out results/mutation/NAME.json]

Each mutant changes one thing that changes a number: an arithmetic operator (+ and -, * and /, ** to *), a
comparison (< and <=, > and >=, == and !=), a numeric constant (n to n + 1), a unary minus dropped, `and` and `or`,
min and max. The module is rewritten with that one change in a scratch copy of the repository (git's tracked
files), and its tests run there (`MODULES`: the test files that exercise it, `-m "not slow"`, stopping at the first
failure). A mutant is *killed* when they fail or run past `TIMEOUT_FACTOR` times their unmutated time, and
*survives* when they pass. The score is killed / all; every survivor is listed with its function and the expression
around the change, to be killed by a new test or explained as equivalent (`EQUIVALENT`, whose reason the record
carries).
`make mutation` runs every module (about an hour on 2 idle cores). `--out` to a file that holds other modules'
scores keeps them: each module's entry has its own command, provenance and the sha256 of the source it scored, so
one changed module is scored again alone (`tests/test_mutation.py` fails while a committed score is of an older
source).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# module -> the test files that exercise it
MODULES = {
    "seed_spread": ("twotower_lib/analysis/seed_spread.py",
                    ("tests/analysis/test_two_questions.py", "tests/test_seeds.py")),
    "correlation": ("twotower_lib/analysis/correlation.py",
                    ("tests/analysis/test_correlation.py", "tests/test_intervals.py")),
    "uncertainty": ("twotower_lib/analysis/uncertainty.py",
                    ("tests/analysis/test_correlation.py", "tests/test_intervals.py")),
    "preference": ("twotower_lib/preference.py", ("tests/test_probe.py", "tests/test_safety.py")),
    "verdicts": ("twotower_lib/paper.py", ("tests/test_verdicts.py", "tests/test_seeds.py",
                                           "tests/analysis/test_two_questions.py")),
}
# top-level names whose values are not mutated: paper.py's transcriptions of the paper (a typo there is caught by
# reading the paper, not by a test); its rules and their named thresholds are
NOT_MUTATED = {"verdicts": ("TABLE1", "TABLE1_VOCAB", "SAME_CONFIG_R", "TABLE2", "TABLE4", "FREQUENCY_RANGE",
                            "FIG4_TAGS", "FIG4_CLAIM", "FIG5_WITHIN_1", "FIG6", "ICA_DIM", "ICA_WIDTH")}
# Survivors that change no result a reader sees beyond the noise the code itself reports, keyed by (module,
# function, the expression around the change as `ast.unparse` writes it, change) -> why
_CENTRED_CONTROL = ("the control zc is centred, so the mean's term is mean * sum(zc) = 0 either way; only float "
                    "rounding differs")
_FIRST_ROW = "the estimate reads the first of identical rows of weights"
EQUIVALENT = {
    **{("correlation", "_prepare", f"({v} - {v}.mean(-1, keepdims=True)) @ zc", "Sub -> Add"): _CENTRED_CONTROL
       for v in "xy"},
    ("uncertainty", "_DocSums.scores", "out[s['n'] <= 0]", "LtE -> Lt"):
        "where a token has no occurrence its sums are 0 too, and log 0 - log 0 (or 0 / 0) is already NaN",
    ("uncertainty", "scores_from_doc_stats", "(1, len(docs))", "1 -> 2"): _FIRST_ROW,
    ("seed_spread", "margin_and_se", "(1, n.size)", "1 -> 2"): _FIRST_ROW,
    ("verdicts", "abs_interval", "if lo >= 0:\n    return (lo, hi)", "GtE -> Gt"):
        "at lo = 0 the last branch gives (0, max(-0, hi)) = (lo, hi): the same interval",
    ("verdicts", "abs_interval", "if hi <= 0:\n    return (-hi, -lo)", "LtE -> Lt"):
        "at hi = 0 the last branch gives (0, max(-lo, 0)) = (-hi, -lo): the same interval",
    ("preference", "", "ARTIFACT_VERSION = 1", "1 -> 2"):
        "the artifact format's tag, written and checked by the same constant",
}
TIMEOUT_FACTOR = 3.0
SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
         ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
         ast.And: ast.Or, ast.Or: ast.And}
NAMES = {"min": "max", "max": "min"}


@dataclass(frozen=True)
class Mutant:
    module: str
    index: int          # the index-th mutable place of the module, in `ast.walk` order
    line: int
    change: str
    function: str = ""  # the enclosing function as Class.method ("" at module level)
    context: str = ""   # the expression around the place changed, as `ast.unparse` writes it


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes that are docstrings or inside f-strings: never mutated (they change no number)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _places(tree: ast.AST, not_mutated: tuple[str, ...] = ()) -> list[tuple[ast.AST, str, object]]:
    """Every place a mutant can change, as (node, what, replacement), but in the top-level assignments to
    `not_mutated`."""
    skip, places = _docstring_nodes(tree), []
    for node in tree.body:
        names = {n.id for t in getattr(node, "targets", ()) for n in ast.walk(t) if isinstance(n, ast.Name)}
        if isinstance(node, ast.Assign) and names & set(not_mutated):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in SWAPS:
            places.append((node, "op", SWAPS[type(node.op)]))
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in SWAPS:
                    places.append((node, f"cmp{i}", SWAPS[type(op)]))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            places.append((node, "const", node.value + 1))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            places.append((node, "neg", None))
        elif isinstance(node, ast.Name) and node.id in NAMES and isinstance(node.ctx, ast.Load):
            places.append((node, "name", NAMES[node.id]))
    return places


def _surroundings(tree: ast.AST) -> tuple[dict[int, ast.AST], dict[int, str]]:
    """Each node's parent, and the qualified name of the function each node is in (by id)."""
    parents, functions = {}, {}

    def visit(node: ast.AST, qualname: str) -> None:
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
            inner = (f"{qualname}.{child.name}" if qualname else child.name
                     ) if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else qualname
            functions[id(child)] = inner
            visit(child, inner)
    visit(tree, "")
    return parents, functions


def mutants(name: str) -> list[Mutant]:
    path = ROOT / MODULES[name][0]
    tree = ast.parse(path.read_text())
    parents, functions = _surroundings(tree)
    out = []
    for i, (node, what, new) in enumerate(_places(tree, NOT_MUTATED.get(name, ()))):
        old = (type(node.op).__name__ if what == "op"
               else type(node.ops[int(what[3:])]).__name__ if what.startswith("cmp")
               else repr(node.value) if what == "const" else "-x" if what == "neg" else node.id)
        now = new.__name__ if isinstance(new, type) else "x" if what == "neg" else repr(new) if what == "const" else new
        out.append(Mutant(name, i, node.lineno, f"{old} -> {now}", functions[id(node)],
                          ast.unparse(parents[id(node)])))
    return out


def why_equivalent(m: Mutant) -> str | None:
    return EQUIVALENT.get((m.module, m.function, m.context, m.change))


def source_sha256(name: str) -> str:
    return hashlib.sha256((ROOT / MODULES[name][0]).read_bytes()).hexdigest()


def mutated_source(m: Mutant) -> str:
    tree = ast.parse((ROOT / MODULES[m.module][0]).read_text())
    node, what, new = _places(tree, NOT_MUTATED.get(m.module, ()))[m.index]
    if what == "op":
        node.op = new()
    elif what.startswith("cmp"):
        node.ops[int(what[3:])] = new()
    elif what == "const":
        node.value = new
    elif what == "name":
        node.id = new
    else:                                   # drop a unary minus: replace the node in its parent
        for parent in ast.walk(tree):
            for field, value in ast.iter_fields(parent):
                if value is node:
                    setattr(parent, field, node.operand)
                elif isinstance(value, list) and any(v is node for v in value):
                    value[[v is node for v in value].index(True)] = node.operand
    return ast.unparse(ast.fix_missing_locations(tree))


def _pytest(copy: Path, tests: tuple[str, ...], timeout: float | None) -> tuple[bool, float]:
    """Run the tests in `copy`: (passed, seconds); a run past `timeout` counts as failed."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.time()
    try:
        rc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                             *tests], cwd=copy, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return False, time.time() - t0
    return rc == 0, time.time() - t0


def scratch_copy(dest: Path) -> Path:
    """The repository's tracked files (as they are in the working tree) copied to `dest`."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    return dest


def run_module(name: str, jobs: int, show=print) -> dict:
    source, tests = MODULES[name]
    all_mutants = mutants(name)
    with tempfile.TemporaryDirectory() as tmp:
        copies = [scratch_copy(Path(tmp) / f"copy{j}") for j in range(jobs)]
        passed, baseline = _pytest(copies[0], tests, None)
        if not passed:
            raise SystemExit(f"error: {name}'s tests fail without a mutant; fix them first")
        timeout = max(30.0, TIMEOUT_FACTOR * baseline)

        free: queue.Queue[Path] = queue.Queue()
        for c in copies:
            free.put(c)

        def one(m: Mutant) -> tuple[Mutant, bool]:
            copy = free.get()                           # one mutant at a time in each copy
            try:
                (copy / source).write_text(mutated_source(m))
                survived, _ = _pytest(copy, tests, timeout)
            finally:
                shutil.copy2(ROOT / source, copy / source)
                free.put(copy)
            return m, survived

        survivors = []
        with ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(one, m) for m in all_mutants]
            for done, f in enumerate(futures, 1):
                m, survived = f.result()
                if survived:
                    survivors.append(m)
                show(f"{name}: {done}/{len(all_mutants)} mutants, {len(survivors)} survived"
                     + (f" (line {m.line}: {m.change})" if survived else ""))
    killed = len(all_mutants) - len(survivors)
    return {"module": source, "tests": list(tests), "mutants": len(all_mutants), "killed": killed,
            "score": round(killed / len(all_mutants), 4) if all_mutants else None,
            "baseline_seconds": round(baseline, 1), "source_sha256": source_sha256(name),
            "survivors": [{"line": m.line, "function": m.function, "expression": m.context, "change": m.change,
                           "equivalent": why_equivalent(m)} for m in survivors]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modules", default=",".join(MODULES), help=f"any of {', '.join(MODULES)}")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="write the scores and survivors as JSON")
    args = p.parse_args(argv)
    names = [n for n in args.modules.split(",") if n]
    if bad := [n for n in names if n not in MODULES]:
        p.error(f"unknown module(s) {bad}; choose from {', '.join(MODULES)}")
    if args.out:
        from twotower_lib.artifacts import atomic_write_json, portable_command, provenance, read_json

        kept = read_json(args.out) if args.out.exists() else {"modules": []}   # read first: a bad file stops here
        kept = kept.get("modules") if isinstance(kept, dict) else None
        if not isinstance(kept, list):
            p.error(f"{args.out} holds no list of module scores ('modules'); give another --out")
        sources = [source for source, _ in MODULES.values()]
        kept = [m for m in kept if m.get("module") in sources]   # a module no longer scored is dropped
    results = [run_module(n, args.jobs, lambda s: print(s, flush=True)) for n in names]
    for r in results:
        unexplained = sum(s["equivalent"] is None for s in r["survivors"])
        print(f"{r['module']}: {r['killed']} of {r['mutants']} mutants killed ({r['score']:.0%}); "
              f"{unexplained} survivor(s) not known to be equivalent")
    if args.out:
        command = portable_command("benchmarks/mutation.py", sys.argv[1:] if argv is None else argv)
        ran = {r["module"] for r in results}
        entries = [m for m in kept if m["module"] not in ran] + [
            r | {"command": command, "provenance": provenance()} for r in results]
        atomic_write_json(args.out, {"modules": sorted(entries, key=lambda m: sources.index(m["module"]))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
