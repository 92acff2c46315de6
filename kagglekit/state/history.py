"""The notebook's history: its cells as they ran (IPython's ``In``, a plain script's source), where its
top level stands now, and the top-level statements that ran before now, each with the names it binds
and loads: what ``reads`` follows a value the code uses back to.
"""
from __future__ import annotations

import ast
import copy
import dis
import inspect
import linecache
import sys
import types


def history(namespace: dict) -> list[str]:
    """The notebook's cells as run (IPython's ``In``), else the module's source."""
    cells = namespace.get("In")
    if isinstance(cells, list) and cells:
        return [c if isinstance(c, str) else "" for c in cells]
    module = sys.modules.get(namespace.get("__name__", ""))
    try:
        return [inspect.getsource(module)] if module is not None else []
    except (OSError, TypeError):
        return []


def now_at(namespace: dict, cells: list[str]) -> tuple[int, int] | None:
    """(the cell running now, its line) where the notebook's top level is at this moment; None
    when it is not running (a function of a plain module called later)."""
    frame = inspect.currentframe()
    while frame is not None:  # a cell's own code runs with its namespace as globals and locals
        # (its name is "<module>", or "<cell line: 0>" under IPython 7: Kaggle's image)
        if frame.f_globals is namespace and not frame.f_code.co_flags & inspect.CO_NEWLOCALS \
                and frame.f_locals is namespace:
            source = "".join(linecache.getlines(frame.f_code.co_filename))
            same = [i for i, cell in enumerate(cells) if cell.rstrip() == source.rstrip()]
            return (same[-1], frame.f_lineno) if same and source.strip() else None
        frame = frame.f_back
    return None


def statements(namespace: dict) -> list[tuple[set, set, ast.stmt]]:
    """``(names bound, global names loaded, the statement)`` of every top-level statement that ran
    before now (definitions and imports aside: their objects are followed live)."""
    cells = history(namespace)
    now = now_at(namespace, cells)
    found = []
    for index, cell in enumerate(cells[:now[0] + 1] if now else cells):
        try:
            body = ast.parse(cell).body
        except SyntaxError:
            continue
        for node in _before(body, now[1]) if now and index == now[0] else body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
                continue
            bound = _bound(node)
            if bound:
                module = ast.fix_missing_locations(ast.Module([node], type_ignores=[]))
                found.append((bound, set(global_loads(compile(module, "<cell>", "exec"))), node))
    return found


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _before(body: list, line: int) -> list:
    """The statements of ``body`` that ran before ``line``: those that end before it, and of the
    compound statement holding it (a loop, an ``if``) its header and the part before it."""
    kept = []
    for node in body:
        inner = getattr(node, "body", None) or [node]  # a match case has no line numbers of its own
        start, end = getattr(node, "lineno", inner[0].lineno), getattr(node, "end_lineno", inner[-1].end_lineno)
        if end < line:
            kept.append(node)
            continue
        if start <= line and any(isinstance(getattr(node, f, None), list) for f in _BODIES):
            part = copy.copy(node)
            for f in _BODIES:
                if isinstance(getattr(node, f, None), list):
                    setattr(part, f, _before(getattr(node, f), line) or [ast.Pass()])
            kept.append(part)
        break  # a simple statement running now binds its names after it runs
    return kept


def _bound(node: ast.stmt) -> set[str]:
    """The global names a statement binds or changes: assignment targets (``x[i] = ``, ``x.a = ``
    change ``x``), loop and ``with`` targets, and the object of a method called as a statement
    (``zoo.update(...)``), inside compound statements too."""
    names: set[str] = set()
    for sub in _outside_scopes(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, (ast.Subscript, ast.Attribute)) and isinstance(sub.ctx, ast.Store):
            names |= _base(sub)
        elif _method_call(sub):
            names |= _base(sub.value.func.value)
    return names


def _method_call(node: ast.AST) -> bool:
    """``x.method(...)`` as a statement of its own (it may change ``x``)."""
    call = node.value if isinstance(node, ast.Expr) else None
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)


def _base(node: ast.expr) -> set[str]:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return {node.id} if isinstance(node, ast.Name) else set()


def _outside_scopes(node: ast.AST):
    """``ast.walk`` that does not enter functions, classes, lambdas or comprehensions (their
    names are their own)."""
    stack = [node]
    while stack:
        sub = stack.pop()
        yield sub
        scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
                  ast.DictComp, ast.GeneratorExp)
        stack += [c for c in ast.iter_child_nodes(sub) if not isinstance(c, scopes)]


def global_loads(code: types.CodeType) -> list[str]:
    """The global names ``code`` and the code nested in it look up (not attributes, not locals)."""
    names = [i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
    for const in code.co_consts:
        if inspect.iscode(const):
            names += global_loads(const)
    return list(dict.fromkeys(names))
