"""The paper's numbers have one home (`twotower_lib.paper`): no other module of the library or the studies types
one of them as a number literal."""

import ast
from pathlib import Path

from twotower_lib import paper

ROOT = Path(__file__).resolve().parent.parent


def paper_values() -> set[float]:
    """The distinctive numbers the paper reports (its tables' cells, Fig. 6's mean, the vocabulary): the ones
    a literal elsewhere would be a copy of. Shares such as 0.8 or 0.45, and the frequency-rank cells (0.16-0.22),
    are too common to search for."""
    cells = {v for k, v in (*paper.TABLE2.items(), *paper.TABLE4.items()) if "Frequency Rank" not in k}
    return cells | {paper.FIG6["mean_groups"], float(paper.TABLE1_VOCAB), 0.265, 0.595}


def typed_copies(source: str) -> list[tuple[int, float]]:
    found = paper_values()
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
            and float(n.value) in found]


def test_a_typed_copy_is_found():
    assert typed_copies("x = 0.94\ny = 0.5") == [(1, 0.94)]


def test_no_module_types_a_paper_number():
    files = [p for folder in ("twotower_lib", "studies") for p in (ROOT / folder).rglob("*.py")
             if p != ROOT / "twotower_lib" / "paper.py"]
    copies = {str(p.relative_to(ROOT)): c for p in files if (c := typed_copies(p.read_text()))}
    assert not copies, copies
