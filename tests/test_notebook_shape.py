"""Each notebook is one pipeline a Kaggle user reads top to bottom: under 250 logic lines, and
cross-validation and a single split run the same cells (no branch on ``folds`` but the choice
of splitter)."""
import ast
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
MAX_LOGIC_LINES = 250


def code_cells(path: Path) -> list[tuple[list, str]]:
    """(tags, source) of every code cell."""
    cells = json.loads(path.read_text())["cells"]
    return [(c.get("metadata", {}).get("tags", []), "".join(c["source"])) for c in cells if c["cell_type"] == "code"]


def logic_lines(path: Path) -> int:
    """Non-blank, non-comment lines outside the parameters cell."""
    return sum(1 for tags, source in code_cells(path) if "parameters" not in tags
               for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def test_every_notebook_is_under_250_logic_lines(capsys):
    counts = {p.stem: logic_lines(p) for p in NOTEBOOKS}
    with capsys.disabled():
        print("\nlogic lines: " + ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda x: -x[1])))
    assert len(counts) == len(NOTEBOOKS) >= 11 and all(c > 20 for c in counts.values())  # the counter reads them
    assert {n: c for n, c in counts.items() if c >= MAX_LOGIC_LINES} == {}


def _branches_on_folds(source: str) -> list[int]:
    """Lines of an ``if`` (statement or expression) that tests ``folds``, except the one
    expression that picks the splitter."""
    tree = ast.parse(source)
    chooser = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and any(getattr(t, "id", "") == "splitter" for t in n.targets)}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.If, ast.IfExp)) and id(n) not in chooser
            and any(isinstance(x, ast.Name) and x.id == "folds" for x in ast.walk(n.test))]


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if "folds_per_version = " in p.read_text()],
                         ids=lambda p: p.stem)
def test_one_split_and_cross_validation_run_the_same_cells(path):
    sources = [s for tags, s in code_cells(path) if "parameters" not in tags]
    assert any("splitter" in s for s in sources), "the folds go through one splitter"
    assert {i: b for i, s in enumerate(sources) if (b := _branches_on_folds(s))} == {}


def test_the_folds_check_sees_a_second_pipeline():
    assert _branches_on_folds("if folds > 1:\n    x = 1\nelse:\n    x = 2\n") == [1]
    assert _branches_on_folds("splitter = KFold(folds) if folds > 1 else Holdout()\n") == []
    assert _branches_on_folds("rows = a if folds > 1 else b\n") == [1]
