"""The house has three floors and imports go one way: studies -> book -> core.

Read from the source (every `import`, including those inside functions), not by running it:
the core (`twotower_lib` outside `twotower_lib.book`) imports neither the book nor a study; the
book imports no study; nothing in the library imports a study; and no chain of imports anywhere
closes a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("twotower_lib", "studies")


def module_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that `name` (a module, or an attribute of one) is, or None if not ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path, module: str, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for n in names:
            target = resolve(n, modules)
            if target and target != module and not (node_is_package_of(target, module)):
                found.add(target)
    return found


def node_is_package_of(target: str, module: str) -> bool:
    """`from twotower_lib.book import x` names the package `twotower_lib.book` on its way to `x`: an edge
    to a package that merely contains the importer is not a dependency on its __init__."""
    return module.startswith(target + ".")


def graph() -> dict[str, set[str]]:
    modules = module_files()
    return {m: imports_of(p, m, modules) for m, p in modules.items()}


def floor(module: str) -> int:
    """0 core, 1 the book's production, 2 a study."""
    if module.startswith("studies"):
        return 2
    return 1 if module.startswith("twotower_lib.book") else 0


FLOORS = ("core", "book", "study")


def test_imports_go_one_way():
    wrong = sorted(f"{m} ({FLOORS[floor(m)]}) imports {t} ({FLOORS[floor(t)]})"
                   for m, targets in graph().items() for t in targets if floor(t) > floor(m))
    assert not wrong, "imports go studies -> book -> core:\n" + "\n".join(wrong)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), as a sorted list."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_closes_a_circle():
    found = cycles(graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("g, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_the_circle_finder_finds_circles(g, expected):
    assert cycles(g) == expected


def test_the_layer_check_sees_imports_inside_functions(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from twotower_lib.book import profiles\n")
    modules = module_files()
    assert "twotower_lib.book.profiles" in imports_of(src, "twotower_lib.probe.run", modules)


def test_the_model_files_import_nothing_of_the_launcher():
    """A model is a model: `models/` imports neither the trainer nor its process setup."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "twotower_lib" / "models"
    launcher = ("twotower_lib.train.loop", "twotower_lib.train.deepspeed_setup", "twotower_lib.train.torch_engine", "twotower_lib.train.checkpoints")
    found = []
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith(launcher)]
    assert not found, found
