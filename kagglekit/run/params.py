"""Validation of notebook parameters.

papermill injects any name it is given (``-p epcohs 3`` creates ``epcohs`` and
leaves ``epochs`` at its default), so a typo would silently be ignored. The
declared parameters are the assignments of the cell tagged ``parameters``; the
injected ones are the cell papermill adds right after it, whose first line is
``# Parameters``. Both are read back from IPython's input history.
"""
from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize

from ..machine.display import INJECTED_MARK
from ..state.identity import ALWAYS_RUN_CONTROL, DEFAULT_RUN_CONTROL

RUN_MARK = "[run]"  # a parameter's comment starting with it: run control, not identity
_CHOICE_WORD = re.compile(r"[\w@.+-]+")  # a declared choice: gcn, map@3, bf16, answer_token


class ParameterError(ValueError):
    """A notebook parameter is unknown or has the wrong type."""


def assignments(source: str) -> dict:
    """``name -> literal value`` of the top-level assignments in ``source``.

    Values that are not literals map to ``...`` (their type is not checked).
    """
    found = {}
    for node in ast.parse(source).body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    found[target.id] = ast.literal_eval(value)
                except ValueError:
                    found[target.id] = ...
    return found


def _only_literal_assignments(source: str) -> bool:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    if not body or not all(isinstance(n, (ast.Assign, ast.AnnAssign)) for n in body):
        return False
    return all(v is not ... for v in assignments(source).values())


def cells(history: list[str]) -> tuple[str, str]:
    """(the parameters cell, papermill's injected cell) from a kernel's input history ("" when
    absent).

    With an injected cell, the declared parameters are in the cell just before it (where
    papermill puts it). Without one (run by hand), they are in the latest cell made only of
    literal assignments, which is what a parameters cell is.
    """
    for i, source in enumerate(history):
        if source.lstrip().startswith(INJECTED_MARK) and i > 0:
            return history[i - 1], source
    for source in reversed(history):
        if _only_literal_assignments(source):
            return source, ""
    return "", ""


def from_history(history: list[str]) -> tuple[dict, dict]:
    """(declared, injected) parameters from a notebook kernel's input history."""
    declared, injected = cells(history)
    return (assignments(declared) if declared else {}), (assignments(injected) if injected else {})


def _commented(source: str) -> dict[str, str]:
    """``name -> its line's comment`` (without ``#``) for every top-level assignment."""
    comments = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
        body = ast.parse(source).body
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    found = {}
    for node in body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        found.update({t.id: comments.get(node.lineno, "") for t in targets if isinstance(t, ast.Name)})
    return found


def marked_run_control(source: str) -> set[str]:
    """Names assigned on lines whose comment starts with ``[run]``: parameters that say how
    long or how a run goes, not what it is (``epochs = 8  # [run] passes over the data``)."""
    return {name for name, comment in _commented(source).items() if comment.startswith(RUN_MARK)}


def _first_word(text: str) -> str:
    match = _CHOICE_WORD.match(text.strip())
    return match.group(0) if match else ""


def choices(source: str) -> dict[str, list[str]]:
    """``name -> its allowed values`` for the text parameters whose comment lists them with
    ``|``: ``conv = "gcn"  # graph convolution: gcn (Kipf & Welling) | sage (GraphSAGE)``.
    Each alternative's first word is a value (the first may follow a ``label:``); a list that
    does not hold the default is prose, not a declaration, and declares nothing."""
    declared, found = assignments(source), {}
    for name, comment in _commented(source).items():
        default = declared.get(name)
        parts = comment.removeprefix(RUN_MARK).split(" | ")
        if not isinstance(default, str) or len(parts) < 2:
            continue
        head = parts[0] if _first_word(parts[0]) == default else parts[0].rpartition(": ")[2]
        values = [_first_word(head)] + [_first_word(p) for p in parts[1:]]
        if default in values and all(values):
            found[name] = values
    return found


def run_control(source: str) -> frozenset:
    """The run-control parameters a parameters cell declares (``[run]``), else the kit's list;
    ``force_retrain``, ``time_budget_s`` and ``save_every_min`` always."""
    marked = marked_run_control(source) if source else set()
    return ALWAYS_RUN_CONTROL | (frozenset(marked) if marked else DEFAULT_RUN_CONTROL)


def _type_ok(default, value) -> bool:
    if default is None or default is ...:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return type(default) is type(value)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def problems(declared: dict, injected: dict, allowed: dict | None = None) -> list[str]:
    """What is wrong with each injected parameter: unknown (with the nearest name), mistyped,
    or outside the choices its comment lists (``allowed``: ``choices`` of the parameters cell)."""
    problems = []
    for name, value in injected.items():
        if name not in declared:
            near = difflib.get_close_matches(name, declared, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"known: {', '.join(sorted(declared))}"
            problems.append(f"unknown parameter {name!r} ({hint})")
        elif not _type_ok(declared[name], value):
            problems.append(f"parameter {name!r} = {value!r} is a {type(value).__name__}, but its "
                            f"default {declared[name]!r} is a {type(declared[name]).__name__}")
        elif value not in (allowed or {}).get(name, [value]):
            near = difflib.get_close_matches(str(value), allowed[name], n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            problems.append(f"parameter {name!r} = {value!r} is not one of its choices ({hint}"
                            f"choose from {' | '.join(allowed[name])})")
    return problems


def check(declared: dict, injected: dict, allowed: dict | None = None) -> None:
    """Raise ParameterError naming every ``problems`` of the injected parameters."""
    found = problems(declared, injected, allowed)
    if found:
        raise ParameterError("; ".join(found) + ". Fix the name or value given to papermill "
                             "(-p NAME VALUE) or to `make run P=...`.")


def read(namespace: dict, declared: dict | None = None) -> tuple[dict, frozenset]:
    """Check the injected parameters; ``({name: value}, run-control names)``.

    Args:
        namespace: the notebook's ``globals()``.
        declared: ``{name: default}``; by default read from the IPython history (and the
            run-control marks with it; given here, the kit's list applies).
    """
    injected, source = {}, ""
    if declared is None:
        source, injected_source = cells(list(namespace.get("In", [])) or _ipython_history())
        declared = assignments(source) if source else {}
        injected = assignments(injected_source) if injected_source else {}
    check(declared, injected, choices(source) if source else None)
    values = {name: namespace.get(name, default) for name, default in declared.items()}
    for name, default in declared.items():  # an int given for a float parameter
        if isinstance(default, float) and isinstance(values[name], int):
            values[name] = namespace[name] = float(values[name])
    return values, run_control(source)


def validate(namespace: dict, declared: dict | None = None) -> dict:
    """``read``'s values only."""
    return read(namespace, declared)[0]


def _ipython_history() -> list[str]:
    try:
        from IPython import get_ipython
    except ImportError:
        return []
    shell = get_ipython()
    return list(shell.user_ns.get("In", [])) if shell is not None else []
