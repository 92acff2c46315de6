"""Which parameters reach a unit, read a second way: from the notebook file's cells through the
compiler's symbol tables (``symtable``), not the kit's walk of live code (``state/reads.py``).

A unit's code root (its qualified name, as ``metrics.json`` records it: ``search.<locals>.objective``)
reads the globals its scope and the scopes inside it look up, and ``run.config["name"]``; what it
closes over is a value handed to it (in the unit's key as a value, not followed here).
A global that is a value is followed to the top-level statements of the notebook that bind or
change it before the unit was made (``made_at``: its cell and line, as recorded); the statement
running then is taken whole, and so may find more than the kit does, never less. Every statement
so followed (the running one aside: the kit takes only its part that ran) is in the unit's key.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import json
import re
import symtable
from pathlib import Path

RUN = "run"  # the run context: what it carries of the parameters is read as run.config[...]
_CONFIG = re.compile(r"\brun\.config(?:\[\s*|\.get\(\s*)[\"'](\w+)[\"']")


class NotebookReading:
    def __init__(self, path: Path):
        cells = [_text(c) for c in json.loads(Path(path).read_text())["cells"] if c["cell_type"] == "code"]
        self.cells = cells
        self.parameters = _assigned(cells[0])  # the parameters cell comes first (test_notebooks)
        self.source = "\n\n".join(cells)
        self.tree = ast.parse(self.source)
        self.table = symtable.symtable(self.source, str(path), "exec")
        self.defined = {n.name: n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        self.imported = {(a.asname or a.name).split(".")[0] for n in self.tree.body
                         if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        self.statements = self.tree.body
        self.running: list[ast.stmt] = []  # the statement that made the unit (a loop, a call)
        self.followed: dict[int, ast.stmt] = {}
        self.through_running = 0  # > 0 while following what the running statement loads

    def reaches(self, qualname: str, made_at: dict | None = None) -> dict[str, str]:
        """``{parameter: path}`` of a root; {} for what has no name of its own (a lambda)."""
        parts = [p for p in qualname.split(".") if p != "<locals>"]
        self.followed, self.through_running = {}, 0
        if "<lambda>" in parts or parts[0] not in self.defined:
            return {}
        self.statements = self._before(made_at)
        found: dict[str, str] = {}
        self._scope(parts, qualname, found, set())
        return found

    def _before(self, made_at: dict | None) -> list[ast.stmt]:
        """The top-level statements that ran before the unit was made (all, when not known)."""
        self.running = []
        if not made_at:
            return self.tree.body
        digests = [hashlib.sha256(c.rstrip().encode()).hexdigest()[:12] for c in self.cells]
        if made_at["cell"] not in digests:  # a cell filled in at build time (gpu_figures' borrowed ones)
            return self.tree.body
        index = digests.index(made_at["cell"])
        statements = [s for c in self.cells[:index] for s in ast.parse(c).body]
        current = [s for s in ast.parse(self.cells[index]).body if s.lineno <= made_at["line"]]
        self.running = [s for s in current if s.end_lineno >= made_at["line"]]
        return statements + current

    def _scope(self, parts: list[str], via: str, found: dict, seen: set) -> None:
        """The names the scope ``parts`` (a top-level def, or one nested in it) reads. A free name
        (a closure's) holds a value handed to the root: the unit's key holds such values."""
        node, table = self.defined[parts[0]], self._child(self.table, parts[0])
        for name in parts[1:]:
            node = next(n for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
            table = self._child(table, name)
        self._config(ast.unparse(node), via, found)
        for name in _globals(table):
            self._name(name, f"{via} -> {name}", found, seen)

    def _name(self, name: str, via: str, found: dict, seen: set) -> None:
        if name in self.parameters:
            found.setdefault(name, via)
            return
        if name in seen or name == RUN or name in self.imported or hasattr(builtins, name):
            return
        seen.add(name)
        if name in self.defined:
            self._scope([name], via, found, seen)
            return
        for statement in self.statements:
            if not isinstance(statement, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)) \
                    and name in _bound(statement):
                self._statement(statement, via, found, seen)

    def _statement(self, statement: ast.stmt, via: str, found: dict, seen: set) -> None:
        running = any(statement is r for r in self.running)  # what it binds is not bound yet when the unit is made:
        if not running and not self.through_running:  # followed for parameters, never asked of the key
            self.followed[id(statement)] = statement
        text = ast.unparse(statement)
        self._config(text, via, found)
        self.through_running += running
        for name in _loaded(text):
            self._name(name, f"{via} -> {name}", found, seen)
        self.through_running -= running

    def _config(self, text: str, via: str, found: dict) -> None:
        for name in _CONFIG.findall(text):
            if name in self.parameters:
                found.setdefault(name, f"{via} -> run.config")

    @staticmethod
    def _child(table, name: str):
        return next(t for t in table.get_children() if t.get_name() == name)


def _text(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _assigned(source: str) -> set[str]:
    return {t.id for n in ast.parse(source).body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name)}


def _globals(table) -> set[str]:
    """The global names a scope and the scopes inside it look up (a class body's too)."""
    names = set()
    for symbol in table.get_symbols():
        in_class_body = table.get_type() == "class" and not symbol.is_assigned()
        if symbol.is_referenced() and (symbol.is_global() or in_class_body):
            names.add(symbol.get_name())
    for child in table.get_children():
        names |= _globals(child)
    return names


def _loaded(text: str) -> set[str]:
    """The names a statement looks up at its level and inside its lambdas and comprehensions."""
    table = symtable.symtable(text, "<statement>", "exec")
    names = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    for child in table.get_children():
        names |= _globals(child) | {s.get_name() for s in child.get_symbols() if s.is_free()}
    return names


def _bound(statement: ast.stmt) -> set[str]:
    """What a statement binds or changes: targets (``x[i] =`` and ``x.a =`` change ``x``), and the
    object of a method called as a statement."""
    names = set()
    for node in ast.walk(statement):
        target = None
        if isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            target = node
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute):
            target = node.value.func.value
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            names.add(target.id)
    return names


def check_units(notebook: Path, outputs: list[Path]) -> int:
    """Every unit recorded in ``outputs``' metrics.json files against the notebook's own code: each
    parameter this reading finds reaching the unit is in its key (or run control, or left out
    by name with a reason), and so is each top-level statement it follows; changing each parameter
    of its key changes the key; no run-control parameter is in it. The number of (unit, parameter)
    cases checked."""
    from kagglekit.run import params
    from kagglekit.state import keys
    reading = NotebookReading(notebook)
    run_control = params.run_control(reading.cells[0])
    cases = 0
    for metrics in outputs:
        for name, unit in json.loads(metrics.read_text()).get("units", {}).items():
            assert all(isinstance(why, str) and why.strip() for why in unit["left_out"].values()), (name, unit)
            config, made = unit["config"], (unit["fingerprint"], unit["code"], unit["statements"])
            derive = lambda c: keys.derive(c, *made)  # noqa: B023, E731
            assert derive(config) == unit["key"], f"{name}: its record does not make its key"
            reached = {}
            for root in unit["roots"]:
                reached.update(reading.reaches(root, unit.get("made_at")))
                for statement in reading.followed.values():
                    assert ast.unparse(statement) in unit["statements"], \
                        f"{notebook.stem}: unit {name}: {root} reads what this statement made, not in its key:\n" \
                        f"{ast.unparse(statement)}"
            for parameter, via in reached.items():
                if parameter in run_control or parameter in unit["left_out"]:
                    continue
                assert parameter in config, f"{notebook.stem}: unit {name}: {parameter} reaches it ({via}) " \
                                            "but is not in its key"
                cases += 1
            for parameter in set(unit["parameters"]) - run_control:
                changed = {**config, parameter: ["another value", config[parameter]]}
                assert derive(changed) != unit["key"], f"{name}: changing {parameter} keeps its key"
            assert not run_control & set(config), f"{name}: run control in its key"
            cases += len(run_control)
    return cases
