"""What a notebook's parameters cell promises about each parameter, and what is wrong with values
given to them: one rule for the kernel (``kk.start``), ``make run`` (before a kernel starts) and
``make push`` (the kernel metadata's parameters, before any network call).

Each parameter's type is its default's. Its comment may declare more, after ``[run]`` (run
control) and before a ``:``::

    folds = 5  # [2, inf): K-fold cross-validation           a range, as an interval: [0, 3], (0, 1],
    pseudo_labels = 0.0  # [0, 1]: ...                         [0, 1), (0, inf): ``[`` holds its end
    conv = "gcn"  # gcn (Kipf & Welling) | sage (GraphSAGE)  choices (text, or integers: 4 | 2): a value
                                                             is one of them (the default is, or the
                                                             list is prose)
    models = "lstm,mlp"  # comma-separated: lstm | transformer | mlp     a list: each member a choice
    fanouts = "10,5"  # comma-separated integers in [1, inf): ...        integers within a range

An interval, not ``>= 2``: papermill reads a parameters line with a second ``=`` as one it cannot
parse, and says so on every run.

A text parameter whose default is not empty is required (an empty value is refused) unless its
comment says ``empty``. Parameters named ``*_dir``, ``*_csv`` or ``*sources`` are paths (a folder,
a file, or an attached Kaggle source's ``owner/slug``): ``paths`` lists them for the checks that
can see the disk. A choice or a member that differs only in case gets "did you mean".
"""
from __future__ import annotations

import ast
import difflib
import io
import math
import re
import tokenize
from dataclasses import dataclass

RUN_MARK = "[run]"  # a parameter's comment starting with it: run control, not identity
PATH_SUFFIXES = ("_dir", "_csv", "sources")
_WORD = re.compile(r"[\w@.+-]+")  # a declared choice: gcn, map@3, bf16, answer_token
_NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
_INTERVAL = re.compile(rf"^\s*([\[(])\s*(-inf|{_NUMBER})\s*,\s*(inf|{_NUMBER})\s*([\])])\s*$")
_LIST = re.compile(r"^comma-separated(?: (integers))?(?: in ([^:]+?))?\s*:\s*(.*)$")


class ParameterError(ValueError):
    """A notebook parameter is unknown, of the wrong type, or outside what its comment declares."""


@dataclass(frozen=True)
class Range:
    low: float = -math.inf
    low_open: bool = False
    high: float = math.inf
    high_open: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{opening}{_number(self.low)}, {_number(self.high)}{closing}"


@dataclass(frozen=True)
class Declared:
    """One parameter as its line declares it."""
    name: str
    default: object
    comment: str = ""
    run_control: bool = False
    choices: tuple = ()  # text: one of these
    members: tuple = ()  # a comma-separated list: each one of these
    integers: bool = False  # a comma-separated list of integers
    range: Range | None = None  # a number, or each integer of a list
    required: bool = False  # text that may not be empty
    path: bool = False

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` for this parameter, in one clause; None when nothing is."""
        if not _type_ok(self.default, value):
            return (f"parameter {self.name!r} = {value!r} is a {type(value).__name__}, but its default "
                    f"{self.default!r} is a {type(self.default).__name__}")
        if isinstance(value, str) and self.required and not value.strip():
            return f"parameter {self.name!r} is empty: it is required (its default: {self.default!r})"
        if self.choices and str(value) not in self.choices:
            return f"parameter {self.name!r} = {value!r} is not one of its choices ({_nearest(value, self.choices)}"\
                   f"choose from {' | '.join(self.choices)})"
        if self.members or self.integers:
            return self._list_problem(value)
        if self.range is not None and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not self.range.holds(value):
            return f"parameter {self.name!r} = {value!r} is out of its range {self.range}"
        return None

    def _list_problem(self, value: str) -> str | None:
        items = [item.strip() for item in value.split(",") if item.strip()]
        if not items and self.required:
            return f"parameter {self.name!r} is empty: it is required (its default: {self.default!r})"
        for item in items:
            if self.members and item not in self.members:
                return (f"parameter {self.name!r} = {value!r} names {item!r}, not one of its members "
                        f"({_nearest(item, self.members)}choose from {' | '.join(self.members)})")
            if self.integers and not re.fullmatch(r"-?\d+", item):
                return f"parameter {self.name!r} = {value!r} holds {item!r}, not an integer"
            if self.integers and self.range is not None and not self.range.holds(int(item)):
                return f"parameter {self.name!r} = {value!r} holds {item}, out of its range {self.range}"
        return None


def declarations(source: str) -> dict[str, Declared]:
    """``{name: Declared}`` for every top-level assignment of a parameters cell."""
    found = {}
    for name, (default, comment) in _commented(source).items():
        marked = comment.startswith(RUN_MARK)
        found[name] = _declared(name, default, comment.removeprefix(RUN_MARK).strip(), marked)
    return found


def _declared(name: str, default, comment: str, run_control: bool) -> Declared:
    head = comment.partition(":")[0]
    listed = _LIST.match(comment)
    path = name.endswith(PATH_SUFFIXES)
    text = isinstance(default, str)
    required = text and bool(default) and "empty" not in comment.lower() and not path
    if listed and text:
        integers, bound, choices = bool(listed.group(1)), listed.group(2), listed.group(3)
        members = tuple(_alternatives(choices)) if " | " in choices else ()
        return Declared(name, default, comment, run_control, members=members, integers=integers,
                        range=_range(bound) if bound else None, required=required, path=path)
    number = isinstance(default, (int, float)) and not isinstance(default, bool)
    return Declared(name, default, comment, run_control, choices=tuple(_choices(default, comment)),
                    range=_range(head) if number else None, required=required, path=path)


def _range(text: str) -> Range | None:
    """``[2, inf)``, ``(0, 1]``, ``[0, 3]``; None when ``text`` is not an interval."""
    interval = _INTERVAL.match(text)
    if interval is None:
        return None
    opening, low, high, closing = interval.groups()
    return Range(float(low), opening == "(" or low == "-inf", float(high), closing == ")" or high == "inf")


def _choices(default, comment: str) -> list[str]:
    """The values a text (or integer) parameter's comment lists with `` | ``; [] when it lists
    none, or when the list does not hold the default (prose, not a declaration)."""
    parts = comment.split(" | ")
    if not isinstance(default, (str, int)) or isinstance(default, bool) or len(parts) < 2:
        return []
    head = parts[0] if _first_word(parts[0]) == str(default) else parts[0].rpartition(": ")[2]
    values = [_first_word(head)] + [_first_word(p) for p in parts[1:]]
    return values if str(default) in values and all(values) else []


def _alternatives(text: str) -> list[str]:
    return [_first_word(p) for p in text.split(" | ") if _first_word(p)]


def _first_word(text: str) -> str:
    match = _WORD.match(text.strip())
    return match.group(0) if match else ""


def _nearest(value, options) -> str:
    """``did you mean 'auc'? `` for the option closest to ``value`` (case aside), else ""."""
    lowered = {o.lower(): o for o in options}
    near = [lowered[str(value).lower()]] if str(value).lower() in lowered else \
        difflib.get_close_matches(str(value).lower(), list(lowered), n=1)
    return f"did you mean {lowered.get(near[0], near[0])!r}? " if near else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return str(int(value)) if float(value).is_integer() else repr(value)


def _type_ok(default, value) -> bool:
    if default is None or default is ...:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return type(default) is type(value)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def _commented(source: str) -> dict[str, tuple]:
    """``name -> (its literal default, its line's comment without #)`` for every top-level
    assignment; a default that is not a literal is ``...`` (its type is not checked)."""
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
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        for target in (t for t in targets if isinstance(t, ast.Name)):
            try:
                default = ast.literal_eval(node.value)  # type: ignore[attr-defined]  # an assignment's
            except ValueError:
                default = ...
            found[target.id] = (default, comments.get(node.lineno, ""))
    return found


def problems(source: str, values: dict) -> list[str]:
    """What is wrong with each of ``values`` against the parameters cell ``source``: an unknown
    name (with the nearest), a wrong type, and anything outside its declaration."""
    declared, found = declarations(source), []
    for name, value in values.items():
        if name not in declared:
            near = difflib.get_close_matches(name, declared, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"known: {', '.join(sorted(declared))}"
            found.append(f"unknown parameter {name!r} ({hint})")
        elif (problem := declared[name].problem(value)) is not None:
            found.append(problem)
    return found


FIX = "Fix it in make run P=\"NAME=VALUE ...\" (papermill: -p NAME VALUE) or in the kernel metadata's parameters."


def check(source: str, values: dict) -> None:
    """Raise ParameterError naming every one of ``problems``, in one line."""
    found = problems(source, values)
    if found:
        raise ParameterError("; ".join(found) + ". " + FIX)
