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


def _type_only(tree: ast.AST) -> set[int]:
    """The imports under ``if TYPE_CHECKING:``: read by the type checker, never run."""
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    return {id(node) for block in blocks for stmt in block.body for node in ast.walk(stmt)}


def _imports(name: str, path: Path, modules: dict, type_only: bool = True) -> set[str]:
    """Every kagglekit module ``name`` imports, at the top or inside a function (and, unless
    ``type_only`` is False, for the type checker alone)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    tree = ast.parse(path.read_text())
    skipped = set() if type_only else _type_only(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or id(node) in skipped:
            continue
        base = package
        for _ in range(max(node.level - 1, 0)):
            base = base.rsplit(".", 1)[0]
        target = (base + ("." + node.module if node.module else "")) if node.level else node.module or ""
        # ``from . import x`` imports the module x, not the package's own __init__
        submodules = {f"{target}.{a.name}" for a in node.names} & set(modules)
        for candidate in submodules or {target}:
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
    # an import the type checker alone reads never runs, so it cannot close a cycle
    graph = {name: _imports(name, path, modules, type_only=False) - {"kagglekit"} for name, path in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_runtime_never_imports_the_tooling():
    modules = _modules()
    runtime = {n: p for n, p in modules.items() if not n.startswith("kagglekit.tools")}
    leaks = {n: sorted(i for i in _imports(n, p, modules) if i.startswith("kagglekit.tools"))
             for n, p in runtime.items()}
    assert not {n: i for n, i in leaks.items() if i}


# The floors: generic machinery, each importing only the floors below it (a strict order, bottom
# first). The rooms: one per kind of data, each importing every floor and no other room.
ORDER = ["machine", "parallel", "state", "readers", "loop", "score", "submit", "run", "search", "llm"]
ROOMS = ["images", "volumes", "audio", "graphs", "tables", "text", "studies"]
MAY_IMPORT = {part: set(ORDER[:i]) for i, part in enumerate(ORDER)} | {room: set(ORDER) for room in ROOMS}


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else None


def test_every_module_lives_in_a_part_with_a_docstring():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside any part: {loose}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders == set(ORDER) | set(ROOMS) | {"tools"}
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


# Every module-level mutable of the runtime, and why it may be one. Rank, world size, device and
# the run are never here: they travel with the Run that launch hands to each rank.
MUTABLES = {
    "kagglekit/__init__.py:_FLOORS": "the lazy import table, never written",
    "kagglekit/__init__.py:_ROOMS": "the lazy import table, never written",
    "kagglekit/__init__.py:_SUBMODULES": "the lazy import table, never written",
    "kagglekit/__init__.py:_EXPORTS": "the lazy import table, never written",
    "kagglekit/loop/monitor.py:ADVICE": "constant advice text per verdict",
    "kagglekit/loop/monitor.py:CPU_ADVICE": "constant advice text per verdict",
    "kagglekit/machine/driver.py:DRIVER_LIBRARIES": "constant library names",
    "kagglekit/machine/emulate.py:MACHINES": "constant table of emulated machine shapes",
    "kagglekit/machine/ascard.py:CARDS": "constant table of imitated cards",
    "kagglekit/text/classifier.py:NON_REENTRANT": "constant checkpointing keywords",
    "kagglekit/machine/ascard.py:_confined": "the cards this process capped, each once",
    "kagglekit/parallel/forkserver.py:PRELOAD": "constant module names the server imports",
    "kagglekit/parallel/forkserver.py:LAZY": "constant module names the server imports per library",
    "kagglekit/machine/cards.py:CAPABILITY": "constant table of known cards",
    "kagglekit/machine/precision.py:_DTYPES": "constant name -> dtype table",
    "kagglekit/parallel/forked.py:HINTS": "constant error hints",
    "kagglekit/parallel/launcher.py:NCCL_ENV": "constant NCCL settings",
    "kagglekit/state/cache.py:_FILES": "constant file names per format",
    "kagglekit/loop/memory.py:_host_baseline": "this process's RSS at the last peak reset",
    "kagglekit/machine/inputs.py:_indexes": "the attached inputs walked once per process",
    "kagglekit/score/metrics.py:_warned_half": "one warning per process",
    "kagglekit/studies/cycles.py:_POOL_STEP": "the step the forked pool workers inherit",
    "kagglekit/llm/llmengine.py:_LOADED": "a worker's engine, loaded once per process",
    "kagglekit/tables/gbdt.py:OBJECTIVES": "constant objective names per task",
    "kagglekit/tables/gbdt.py:EVAL": "constant validation metric names per task",
    "kagglekit/machine/signals.py:_requested": "this process's stop request (a signal handler sets it)",
    "kagglekit/loop/progress.py:_quiet": "a context variable: quiet bars inside a with-block only",
    "kagglekit/machine/budget.py:_whole_or_nothing": "a context variable: set while a search trial runs",
    "kagglekit/parallel/mapped.py:_ORIGINS": "this process's tensors mapped from files, while each lives",
    "kagglekit/parallel/mapped.py:_OPENED": "the files a receiving process mapped, each once",
}
_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter", "bytearray",
                  "WeakKeyDictionary", "WeakValueDictionary", "WeakSet",
                  "Event", "ContextVar", "Lock", "RLock", "Condition", "Semaphore", "local"}  # state, too


def _is_mutable(value) -> bool:
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    func = getattr(value, "func", None)
    return getattr(func, "id", getattr(func, "attr", None)) in _MUTABLE_CALLS


def module_mutables(package: Path = PACKAGE) -> set[str]:
    """``file:name`` of every module-level mutable (a list, dict or set built at import, or a
    name rebound through ``global``) in the runtime (the tooling wing aside)."""
    found = set()
    for path in package.rglob("*.py"):
        if "tools" in path.relative_to(package).parts:
            continue
        where = path.relative_to(package.parent).as_posix()
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _is_mutable(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found |= {f"{where}:{t.id}" for t in targets if isinstance(t, ast.Name)}
        found |= {f"{where}:{n}" for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    return found


def test_every_module_level_mutable_is_on_the_list_and_none_holds_rank_world_or_device():
    found = module_mutables()
    assert not found - set(MUTABLES), f"not on MUTABLES (pass it explicitly): {found - set(MUTABLES)}"
    assert not set(MUTABLES) - found, f"MUTABLES lists what no longer exists: {set(MUTABLES) - found}"
    names = [m.split(":")[1].lower() for m in MUTABLES]
    assert not [n for n in names if any(w in n for w in ("rank", "world", "device", "run", "context"))]


def test_the_mutables_check_catches_a_new_global(tmp_path):
    """The check above on a copy of the package with a rank kept in a module: it is found."""
    import shutil
    copy = tmp_path / "kagglekit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    ranks = copy / "parallel" / "ranks.py"
    ranks.write_text(ranks.read_text() + "\n_state = {}\n\n\ndef set_rank(r):\n    global _rank\n    _rank = r\n")
    assert module_mutables(copy) - set(MUTABLES) == {"kagglekit/parallel/ranks.py:_state",
                                                     "kagglekit/parallel/ranks.py:_rank"}


def test_no_floor_imports_the_package_face():
    """``from .. import x`` in a part would load kagglekit/__init__.py from below it: the version
    lives on the ground floor (machine/version.py) and pyproject.toml says the same."""
    face = []
    for path in PACKAGE.rglob("*.py"):
        depth = len(path.relative_to(PACKAGE).parts) - 1
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ImportFrom) and node.module is None and node.level == depth + 1
                    and path != PACKAGE / "__init__.py"):
                face.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not face, face
    import tomllib

    from kagglekit.machine.version import __version__
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == __version__


def test_notebooks_ask_the_run_who_they_are():
    """Rank, world size and device come from ``run`` in the notebooks, never from ``kk.ranks``;
    ``launch`` reads the process count from the run."""
    for path in (REPO / "notebooks").glob("*.ipynb"):
        text = path.read_text()
        for gone in ("kk.ranks.", "nprocs=", "workcap", "kk.launcher.context"):
            assert gone not in text, f"{path.name}: {gone}"


def test_fits_loop_reads_on_one_screen():
    """The loop of epochs.py (``EpochLoop.run`` + ``train_epoch``) fits in about 60 lines."""
    tree = ast.parse((PACKAGE / "loop" / "epochs.py").read_text())
    loop = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EpochLoop")
    body = {f.name: f.end_lineno - f.lineno + 1 for f in loop.body if isinstance(f, ast.FunctionDef)}
    assert body["run"] + body["train_epoch"] <= 60, body


# A module's private names (``_name``) are its own: another module that needs one needs it public.
# Each exception, and why (none today).
PRIVATE_REACH_INS: dict[str, str] = {}


def private_reach_ins(path: Path, kit_modules: set[str]) -> list[str]:
    """``from x import _y`` (the name imported, not an alias) and ``x._y`` on a kit module bound in
    ``path``."""
    tree = ast.parse(path.read_text())
    found, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            local = node.level > 0 or (node.module or "").startswith("kagglekit")
            for alias in node.names if local else []:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"from {'.' * node.level}{node.module or ''} import {alias.name}")
                if alias.name in kit_modules:
                    bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("kagglekit")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    kit_modules = {p.stem for p in PACKAGE.rglob("*.py")}
    reaching = {f"{p.relative_to(PACKAGE.parent)}: {r}" for p in PACKAGE.rglob("*.py")
                for r in private_reach_ins(p, kit_modules)}
    assert sorted(reaching - set(PRIVATE_REACH_INS)) == []


def test_a_new_reach_in_is_caught(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from ..run.plots import _pyplot\nfrom . import keys\nkeys._code_of(1)\n"
                      "from .found import names as _names\n")
    assert private_reach_ins(module, {"keys", "found", "plots"}) == ["from ..run.plots import _pyplot",
                                                                      "keys._code_of"]


SWALLOWED = r"#[^\n]*\b[a-z_]+=[a-z_]+\b[^\n]*,\s*$"  # a comment ending in "name=name," is a call's arguments


def _swallowed(root: Path) -> list[str]:
    import re
    return [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(SWALLOWED, line)]


def test_no_call_s_arguments_hide_in_a_comment():
    """A `# type: ignore[...]` put before the rest of a call's line once turned its arguments into a comment:
    the GNN's loaders took none of train, seed, device or workers for six sessions, and nothing failed."""
    assert _swallowed(PACKAGE) == [] and _swallowed(REPO / "benchmarks") == []


def test_a_swallowed_argument_is_caught(tmp_path):
    (tmp_path / "m.py").write_text("f(a,  # type: ignore[arg-type]  # why seed=seed, device=device,\n  b)\n")
    assert _swallowed(tmp_path) == ["m.py:1"]
