"""The layout holds: short modules in parts that import only the parts below them, no import
cycles, a runtime that never loads the tooling, and no run state in module globals."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "kagglekit"
MAX_LINES = 320  # "no module over ~300 lines"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """Every kagglekit module ``name`` imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package
        for _ in range(max(node.level - 1, 0)):
            base = base.rsplit(".", 1)[0]
        target = (base + ("." + node.module if node.module else "")) if node.level else node.module or ""
        for candidate in [target] + [f"{target}.{a.name}" for a in node.names]:
            if candidate in modules and candidate != name:
                found.add(candidate)
    return found


def _cycle(graph: dict) -> list[str] | None:
    """One import cycle, or None (depth-first search)."""
    state, stack = {}, []

    def visit(v):
        state[v] = "open"
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == "open":
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = "done"
        stack.pop()
        return None
    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_module_is_longer_than_a_few_screens():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_import_cycles_not_even_through_lazy_imports():
    modules = _modules()
    graph = {name: _imports(name, path, modules) - {"kagglekit"} for name, path in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_runtime_never_imports_the_tooling():
    modules = _modules()
    runtime = {n: p for n, p in modules.items() if not n.startswith("kagglekit.tools")}
    leaks = {n: sorted(i for i in _imports(n, p, modules) if i.startswith("kagglekit.tools"))
             for n, p in runtime.items()}
    assert not {n: i for n, i in leaks.items() if i}


# Each part and the parts it may import (its own modules aside): a strict order, bottom first.
ORDER = ["machine", "parallel", "state", "readers", "loop", "run", "search", "tasks"]
MAY_IMPORT = {part: set(ORDER[:i]) for i, part in enumerate(ORDER)}


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else None


def test_every_module_lives_in_a_part_with_a_docstring():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside any part: {loose}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders == set(ORDER) | {"tools"}
    for part in folders:
        doc = ast.get_docstring(ast.parse((PACKAGE / part / "__init__.py").read_text()))
        assert doc and len(doc) > 120, f"kagglekit/{part}/__init__.py: say what the part holds"


def test_each_part_imports_only_the_parts_below_it():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        part = _part(name)
        if part not in MAY_IMPORT:
            continue
        for imported in _imports(name, path, modules):
            other = _part(imported)
            if other and other != part and other not in MAY_IMPORT[part]:
                wrong.append(f"{name} -> {imported}")
    assert not wrong, wrong


def test_no_module_keeps_the_run_in_a_global():
    """The run context is passed explicitly: no module-level slot is assigned through
    ``global`` (a run policy installed and read back)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "tools" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Global) and any("run" in n or "policy" in n for n in node.names):
                found.append(f"{path.relative_to(REPO)}: global {', '.join(node.names)}")
    assert not found, found
    notebooks = " ".join(p.read_text() for p in (REPO / "notebooks").glob("*.ipynb"))
    assert "workcap" not in notebooks and "kk.launcher.context" not in notebooks


def test_fits_loop_reads_on_one_screen():
    """The loop of train.py (``_Loop.run`` + ``train_epoch``) fits in about 60 lines."""
    tree = ast.parse((PACKAGE / "loop" / "train.py").read_text())
    loop = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Loop")
    body = {f.name: f.end_lineno - f.lineno + 1 for f in loop.body if isinstance(f, ast.FunctionDef)}
    assert body["run"] + body["train_epoch"] <= 60, body
