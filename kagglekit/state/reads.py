"""The notebook parameters a unit's work reads, found in its code: no hand-kept list.

A unit's key must change when anything its work depends on changes. Its code's version is in
the key (``keys.code_version``); so is every parameter that code reads, found here:

- the parameters its functions and classes (and the notebook's functions and classes they
  reach) name directly (``lr``, ``seed``);
- through the notebook's *values* they use: ``train_set`` was made by a cell from
  ``text_column`` and ``max_length``, so a unit training on ``train_set`` reads both. Each such
  value is followed back to the top-level statements that bound (or changed) it in the
  notebook's history, and their own names are followed in turn;
- ``run.config["name"]`` and ``run.config.get("name")``; any other use of ``run.config`` is
  every parameter (``run``: that name, or a global holding a value of the ``opaque`` types).

The statements so followed are part of the unit's identity too (``trace``: their source as
``ast.unparse`` writes it, comments and spacing aside), and so are the notebook's functions and
classes reached through them: editing ``MEAN = (0.485, ...)`` or the class a cell builds a value
from retrains what reads that value, as editing its own function does.

A statement that binds several names (an ``if`` cell) is followed whole: a name may depend on
more than it does, never on less. Only what ran before the unit was made counts: the statement
making it (``params = {m: search(m) for m in models}``) has not bound its names yet, so a
search's study does not depend on its own trial count through the value it is about to return.
A parameter is left out of a unit's identity only by naming it with the reason
(``run.unit(..., leave_out={"model_dir": "its identity is base_model"})``).

``handed_values``: the plain values the functions hold (closures, defaults, a partial's
arguments), keyed beside the parameters: a value handed to the work changes what it computes.

The history is IPython's input (``In``) in a notebook, the module's source in a plain script.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import sys
import textwrap
import types
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from . import history, keys

EVERY = "*"  # a use of run.config as a whole: every parameter


@dataclass(frozen=True)
class Reads:
    """What a unit's code reads of the notebook besides its own source."""
    parameters: dict  # {parameter: how the code reaches it}
    statements: tuple[str, ...] = ()  # the top-level statements that made the values it reads, in the order they ran
    functions: tuple = ()  # the notebook's functions and classes it reaches, through those values too


def trace(roots, parameters: Collection[str], opaque: tuple = ()) -> Reads:
    """What the functions and classes ``roots`` (one or a list) read: the ``parameters`` (the
    notebook's) they reach, each with its path (``train -> train_set -> tokenized``: what a person
    follows to see why a parameter is in a unit's key), and the statements and functions on the
    way. Values of the ``opaque`` types are not followed to their statements (the run context:
    what it carries of the parameters is read through ``run.config``, and its calls,
    ``run.log(...)``, change no result)."""
    roots = [r for r in (roots if isinstance(roots, (list, tuple)) else [roots]) if r is not None]
    code = [keys.code_of(r) or r for r in roots]
    code = [c for c in code if inspect.isfunction(c) or inspect.isclass(c)]
    if not code:
        return Reads({})
    namespace = _namespace(code[0])
    walk = _Walk(namespace, set(parameters), history.statements(namespace), code[0].__module__, opaque)
    for root in code:
        walk.function(root, _label(root))
    statements = tuple(ast.unparse(walk.statements[i][2]) for i in sorted(walk.followed))
    functions = sorted(walk.functions.values(), key=lambda f: (f.__module__, f.__qualname__))
    return Reads(walk.found, statements, tuple(functions))  # in an order no process's hash seed changes


def parameters_read(roots, parameters: Collection[str], opaque: tuple = ()) -> dict[str, str]:
    """``{parameter: how the code reaches it}``: ``trace``'s parameters."""
    return trace(roots, parameters, opaque).parameters


def made_at(roots) -> dict | None:
    """Where the notebook's top level stands while a unit of ``roots`` is made: the running
    cell (the sha256 of its source, 12 digits) and line; None outside a running notebook. What
    ran before that point is what ``parameters_read`` follows."""
    code = [keys.code_of(r) or r for r in (roots if isinstance(roots, (list, tuple)) else [roots])]
    code = [c for c in code if inspect.isfunction(c) or inspect.isclass(c)]
    if not code:
        return None
    namespace = _namespace(code[0])
    cells = history.history(namespace)
    now = history.now_at(namespace, cells)
    if now is None:
        return None
    digest = hashlib.sha256(cells[now[0]].rstrip().encode()).hexdigest()[:12]
    return {"cell": digest, "line": now[1]}


class _Walk:
    """One search from a unit's code to the parameters it reads."""

    def __init__(self, namespace: dict, parameters: set, statements: list, module: str, opaque: tuple):
        self.namespace, self.parameters, self.statements, self.module = namespace, parameters, statements, module
        self.opaque = opaque
        self.runs = {"run"} | {n for n, v in namespace.items() if opaque and isinstance(v, opaque)}
        self.found: dict[str, str] = {}
        self.seen: set[str] = set()
        self.walked: set[int] = set()  # functions followed through closures and defaults
        self.followed: set[int] = set()  # indices of the statements followed
        self.functions: dict[int, Any] = {}  # the notebook's functions and classes walked

    def function(self, obj, via: str) -> None:
        """A function's or class's global loads, ``run.config`` reads, and the notebook functions
        its closure and defaults hold (a closure's other values are handed to it: not parameters)."""
        self.seen.add(getattr(obj, "__name__", ""))
        self.functions.setdefault(id(obj), obj)
        for code in _code_objects(obj):
            self.names(history.global_loads(code), via)
        self.config(_config_reads_of(obj, self.runs), via)
        for held in _held(obj):
            own = keys.code_of(held)
            if own is not None and own is not obj and getattr(own, "__module__", None) == self.module \
                    and id(own) not in self.walked:
                self.walked.add(id(own))
                self.function(own, f"{via} -> {_label(own)}")

    def names(self, names: Iterable[str], via: str) -> None:
        for name in names:
            if name in self.parameters:
                self.found.setdefault(name, f"{via} -> {name}")
            elif name not in self.seen:
                self.seen.add(name)
                self.follow(name, f"{via} -> {name}")

    def follow(self, name: str, via: str) -> None:
        """A global of the notebook: its function's or class's reads (a library's is pinned, not
        followed), and the statements that bound or changed it (an assignment binds a function
        too: ``act = functools.partial(F.gelu, approximate=APPROX)``)."""
        if name not in self.namespace:
            return  # a builtin, or a name bound later
        value = self.namespace[name]
        own = keys.code_of(value)
        if own is not None and getattr(own, "__module__", None) == self.module:
            self.function(own, via)
        if isinstance(value, (types.ModuleType, *self.opaque)):
            return
        for index, (bound, loads, node) in enumerate(self.statements):
            if name in bound:
                self.followed.add(index)
                self.names(sorted(loads), via)  # a set: sorted, so that every process finds the same paths
                self.config(_config_reads(node, self.runs), via)

    def config(self, names: set[str], via: str) -> None:
        for name in (self.parameters if EVERY in names else names & self.parameters):
            self.found.setdefault(name, f"{via} -> run.config")


def _label(obj) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


def _namespace(obj) -> dict:
    if inspect.isfunction(obj):
        return obj.__globals__
    module = sys.modules.get(obj.__module__)
    return vars(module) if module is not None else {}


def _held(obj) -> list:
    """What a function holds besides its code: its closure's values and its defaults."""
    if not inspect.isfunction(obj):
        return []
    return keys.closed_over(obj) + list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())


def _code_objects(obj) -> list[types.CodeType]:
    if inspect.isfunction(obj):
        return [obj.__code__]
    members = [getattr(m, "__func__", getattr(m, "fget", m)) for m in vars(obj).values()]
    return [f.__code__ for f in map(keys.code_of, members) if inspect.isfunction(f)]



def _config_reads_of(obj, runs: set[str]) -> set[str]:
    try:
        source = textwrap.dedent(keys.source_of(obj))
        return _config_reads(ast.parse(source), runs)
    except (OSError, TypeError, SyntaxError):  # no source: a use of .config means every parameter
        return {EVERY} if any("config" in c.co_names for c in _code_objects(obj)) else set()


def _config_reads(node: ast.AST, runs: set[str]) -> set[str]:
    """Parameters read as ``run.config["name"]`` / ``run.config.get("name")`` (``run``: a name in
    ``runs``); ``EVERY`` for any other use of ``run.config`` (``{**run.config}``)."""
    named, uses, by_name = set(), set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and _is_config(sub, runs) and isinstance(sub.ctx, ast.Load):
            uses.add(id(sub))
        config, key = None, None
        if isinstance(sub, ast.Subscript) and _is_config(sub.value, runs):
            config, key = sub.value, sub.slice
        elif (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get"
              and _is_config(sub.func.value, runs) and sub.args):
            config, key = sub.func.value, sub.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            named.add(key.value)
            by_name.add(id(config))
    return named | ({EVERY} if uses - by_name else set())


def _is_config(node: ast.AST, runs: set[str]) -> bool:
    """``<run>.config``: a model's or another object's ``config`` attribute is not the run's."""
    return (isinstance(node, ast.Attribute) and node.attr == "config" and isinstance(node.value, ast.Name)
            and node.value.id in runs)


def handed_values(roots: list) -> dict:
    """The plain values (numbers, text, lists and dicts of them) the roots hold: their closures',
    their defaults', a partial's arguments. Values handed to the unit (a model's defaults closed
    over by its search's objective): in its key, where a parameter they came from is not found."""
    found = {}
    for root in roots:
        function = root.func if isinstance(root, functools.partial) else keys.code_of(root)
        if isinstance(root, functools.partial):
            found[f"{getattr(function, '__qualname__', '?')}(partial)"] = [list(root.args), root.keywords]
        if not inspect.isfunction(function):
            continue
        code, named = function.__code__, {}
        for name, cell in zip(code.co_freevars, function.__closure__ or ()):
            try:
                named[name] = cell.cell_contents
            except ValueError:  # a cell not assigned yet
                pass
        defaults = function.__defaults__ or ()
        named.update(zip(code.co_varnames[code.co_argcount - len(defaults):code.co_argcount], defaults))
        named.update(function.__kwdefaults__ or {})
        found.update({f"{function.__qualname__}.{n}": v for n, v in named.items()})
    return {name: value for name, value in found.items() if _plain(value)}


def _plain(value) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
