"""Validation of notebook parameters.

papermill injects any name it is given (``-p epcohs 3`` creates ``epcohs`` and
leaves ``epochs`` at its default), so a typo would silently be ignored. The
declared parameters are the assignments of the cell tagged ``parameters``; the
injected ones are the cell papermill adds right after it, whose first line is
``# Parameters``. Both are read back from IPython's input history.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ..machine.display import INJECTED_MARK
from ..state.identity import ALWAYS_RUN_CONTROL, DEFAULT_RUN_CONTROL
from . import contract
from .contract import ParameterError  # noqa: F401 (kk.params.ParameterError)


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
                    found[target.id] = ast.literal_eval(value)  # type: ignore[arg-type]  # set with targets
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


def marked_run_control(source: str) -> set[str]:
    """Names assigned on lines whose comment starts with ``[run]``: parameters that say how
    long or how a run goes, not what it is (``epochs = 8  # [run] passes over the data``)."""
    return {name for name, d in contract.declarations(source).items() if d.run_control}


def choices(source: str) -> dict[str, list[str]]:
    """``name -> its allowed values`` for the text parameters whose comment lists them with
    ``|`` (``contract``)."""
    return {name: list(d.choices) for name, d in contract.declarations(source).items() if d.choices}


def run_control(source: str) -> frozenset:
    """The run-control parameters a parameters cell declares (``[run]``), else the kit's list;
    ``force_retrain``, ``time_budget_s`` and ``save_every_min`` always."""
    marked = marked_run_control(source) if source else set()
    return ALWAYS_RUN_CONTROL | (frozenset(marked) if marked else DEFAULT_RUN_CONTROL)


def check(source: str, injected: dict) -> None:
    """Raise ParameterError naming every problem of the injected values (``contract.check``)."""
    contract.check(source, injected)


@dataclass(frozen=True)
class Given:
    """A notebook's parameters as a run got them."""
    values: dict  # every parameter: {name: value}
    run_control: frozenset  # the names that are run control
    injected: dict  # what the run was given (papermill's cell): the user's own values
    source: str  # the parameters cell ("" when declared by hand)


def read(namespace: dict, declared: dict | None = None) -> Given:
    """Check the injected parameters against the parameters cell (``contract``); the values.

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
    check(source or "\n".join(f"{name} = {value!r}" for name, value in declared.items()), injected)
    values = {name: namespace.get(name, default) for name, default in declared.items()}
    for name, default in declared.items():  # an int given for a float parameter
        if isinstance(default, float) and isinstance(values[name], int):
            values[name] = namespace[name] = float(values[name])
    return Given(values, run_control(source), injected, source)


def validate(namespace: dict, declared: dict | None = None) -> dict:
    """``read``'s values only."""
    return read(namespace, declared).values


def _ipython_history() -> list[str]:
    try:
        from IPython import get_ipython
    except ImportError:
        return []
    shell = get_ipython()
    return list(shell.user_ns.get("In", [])) if shell is not None else []
