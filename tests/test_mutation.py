"""`benchmarks/mutation.py` (`make mutation`): the mutants it makes each change one number-changing place of a
science-core module, and the module so changed still parses; a mutant the tests notice is killed."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "benchmarks" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation"] = module          # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["seed_spread", "correlation", "uncertainty", "preference", "verdicts"])
def test_every_mutant_changes_one_place_and_parses(mutation, name):
    path = ROOT / mutation.MODULES[name][0]
    original = ast.unparse(ast.parse(path.read_text()))
    found = mutation.mutants(name)
    assert len(found) > 20 and all(Path(ROOT / t).exists() for t in mutation.MODULES[name][1])
    for m in found[:: max(1, len(found) // 15)]:
        source = mutation.mutated_source(m)
        ast.parse(source)
        changed = [a for a, b in zip(original.splitlines(), source.splitlines()) if a != b]
        assert source != original and len(changed) == 1, (m, changed)
    # docstrings and f-strings are never mutated: they change no number
    assert not any(m.change.startswith("'") for m in found)


def test_a_mutant_the_tests_notice_is_killed_and_one_they_miss_survives(mutation, tmp_path, monkeypatch):
    import shutil

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "calc.py").write_text("def half(x):\n    return x / 2\n\n\ndef unused(x):\n    return x - 1\n")
    (tmp_path / "test_calc.py").write_text("from pkg.calc import half\n\n\ndef test_half():\n    assert half(4) == 2\n")
    monkeypatch.setitem(mutation.MODULES, "calc", ("pkg/calc.py", ("test_calc.py",)))
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    monkeypatch.setattr(mutation, "scratch_copy", lambda dest: shutil.copytree(tmp_path, dest))
    result = mutation.run_module("calc", 1, show=lambda s: None)
    changes = {s["change"] for s in result["survivors"]}
    assert result["mutants"] == 4 and result["killed"] == 2 and changes == {"Sub -> Add", "1 -> 2"}, result


def test_the_committed_scores_are_of_the_current_science_core(mutation):
    """`results/mutation/`: one score per module of `MODULES`, of the source as it is now (its sha256), at least 90%
    of the mutants killed (issue #69's bar), and every survivor explained as equivalent (`EQUIVALENT`, which the
    record's reason must match): a changed core module, or a survivor nobody has explained, fails here until
    `python benchmarks/mutation.py --modules NAME --out results/mutation/core.json` scores it again."""
    from twotower_lib.artifacts import read_json

    entries = [m for f in sorted((ROOT / "results" / "mutation").glob("*.json")) for m in read_json(f)["modules"]]
    by_source = {m["module"]: m for m in entries}
    assert len(by_source) == len(entries), "a module is scored in two files"
    assert sorted(by_source) == sorted(source for source, _ in mutation.MODULES.values())
    for name, (source, tests) in mutation.MODULES.items():
        entry = by_source[source]
        again = f"python benchmarks/mutation.py --modules {name} --out results/mutation/core.json"
        assert entry["source_sha256"] == mutation.source_sha256(name), f"{source} changed since it was scored: {again}"
        assert entry["tests"] == list(tests) and entry["killed"] + len(entry["survivors"]) == entry["mutants"]
        assert entry["score"] >= 0.9 and entry["mutants"] == len(mutation.mutants(name)), (source, again)
        for s in entry["survivors"]:
            key = (name, s["function"], s["expression"], s["change"])
            assert s["equivalent"] and s["equivalent"] == mutation.EQUIVALENT.get(key), (key, "kill it with a test")


def test_a_survivor_is_known_by_its_function_and_expression_not_its_line(mutation):
    """`EQUIVALENT` names each equivalent survivor by where it is, so a line moved above it keeps its reason; the same
    operator elsewhere in the function (the centring that `_prepare` returns) is not covered by it."""
    found = [m for m in mutation.mutants("correlation") if m.function == "_prepare" and m.change == "Sub -> Add"]
    explained = [m for m in found if mutation.why_equivalent(m)]
    assert [m.context for m in explained] == ["(x - x.mean(-1, keepdims=True)) @ zc",
                                              "(y - y.mean(-1, keepdims=True)) @ zc"]
    assert len(found) > len(explained)     # the residualisation's outer subtraction and the return's centring


def test_out_replaces_the_modules_scored_and_keeps_the_others(mutation, tmp_path, monkeypatch):
    """`--out` to a file of scores: the modules this run scores are replaced (with their command and provenance),
    the others kept, a module no longer in `MODULES` dropped; a file that holds no list of scores stops the run
    before any mutant is made."""
    import json

    out = tmp_path / "core.json"
    old = [{"module": mutation.MODULES[n][0], "score": 0.5} for n in ("seed_spread", "verdicts")]
    out.write_text(json.dumps({"modules": old + [{"module": "twotower_lib/gone.py", "score": 1.0}]}))
    monkeypatch.setattr(mutation, "run_module", lambda name, jobs, show: {"module": mutation.MODULES[name][0],
                                                                         "score": 0.99, "killed": 99, "mutants": 100,
                                                                         "survivors": []})
    assert mutation.main(["--modules", "verdicts", "--out", str(out)]) == 0
    entries = {m["module"]: m for m in json.loads(out.read_text())["modules"]}
    assert sorted(entries) == sorted(mutation.MODULES[n][0] for n in ("seed_spread", "verdicts"))
    assert entries[mutation.MODULES["seed_spread"][0]] == old[0]
    scored = entries[mutation.MODULES["verdicts"][0]]
    assert scored["score"] == 0.99 and "--modules verdicts" in scored["command"] and scored["provenance"]["python"]

    out.write_text(json.dumps([1, 2]))
    monkeypatch.setattr(mutation, "run_module", lambda *a: pytest.fail("scored before the file was checked"))
    with pytest.raises(SystemExit):
        mutation.main(["--modules", "verdicts", "--out", str(out)])
