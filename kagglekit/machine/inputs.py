"""The attached inputs, walked once per process.

Kaggle mounts every input read-only (``/kaggle/input/<slug>``, or since 2026
``/kaggle/input/{datasets,competitions,notebooks}/<owner>/<slug>``): they cannot
change while a kernel runs. Checkpoint, cache and study lookups all ask "where
under the inputs is ``checkpoints/<name>``?"; a competition with 10^5 files would
pay a full walk on every lookup, so the walk happens once and lookups read the
index (a dict from file name to paths).
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path, PurePosixPath


class InputIndex:
    """Every file and folder under ``roots``, by name. Walked once in the notebook's process
    (``kk.start``); the kit's ranks, search workers and isolated children receive it with what
    they run (``walked``, ``adopt``), and never walk again."""

    def __init__(self, roots: list[Path]):
        self.roots = [Path(r) for r in roots]
        self._by_name: dict[str, list[Path]] | None = None

    @property
    def by_name(self) -> dict[str, list[Path]]:
        if self._by_name is None:
            self._by_name = _walk(self.roots)
        return self._by_name

    def find(self, pattern: str) -> list[Path]:
        """Paths whose trailing parts match ``pattern`` ("checkpoints/m", "*.db"),
        root by root, each root's matches sorted."""
        parts = PurePosixPath(pattern).parts
        last = parts[-1]
        if any(c in last for c in "*?["):
            names = [n for n in self.by_name if fnmatch.fnmatchcase(n, last)]
        else:
            names = [last] if last in self.by_name else []
        hits = [p for n in names for p in self.by_name[n] if _tail_matches(p, parts)]
        order = {root: i for i, root in enumerate(self.roots)}
        return sorted(hits, key=lambda p: (_root_of(p, order), str(p)))

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_name.values())


def _walk(roots: list[Path]) -> dict[str, list[Path]]:
    index: dict[str, list[Path]] = {}
    for root in roots:
        for folder, dirs, files in os.walk(root, followlinks=True):
            base = Path(folder)
            for name in dirs + files:
                index.setdefault(name, []).append(base / name)
    return index


def _tail_matches(path: Path, parts: tuple) -> bool:
    tail = path.parts[-len(parts):]
    return len(tail) == len(parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(tail, parts))


def _root_of(path: Path, order: dict) -> int:
    for root, i in order.items():
        if path.is_relative_to(root):
            return i
    return len(order)


_indexes: dict[tuple, InputIndex] = {}


def index(roots: list[Path]) -> InputIndex:
    """The process's index of ``roots`` (walked at the first lookup, then kept)."""
    key = tuple(str(r) for r in roots)
    if key not in _indexes:
        _indexes[key] = InputIndex(roots)
    return _indexes[key]


def forget() -> None:
    """Drop every index (tests that mount new inputs mid-process)."""
    _indexes.clear()


def walked() -> dict[tuple, InputIndex]:
    """The indexes this process has walked: what a child of the kit's is sent."""
    return {key: found for key, found in _indexes.items() if found._by_name is not None}


def adopt(indexes: dict[tuple, InputIndex]) -> None:
    """In a child: the parent's walked indexes, kept as this process's own."""
    for key, found in indexes.items():
        _indexes.setdefault(key, found)


def attached(reference: str, roots: list[Path]) -> Path | None:
    """The folder of an attached Kaggle source named ``owner/slug`` (or ``slug``), in
    either input layout: ``<root>/datasets/<owner>/<slug>`` (also competitions,
    notebooks) or the older flat ``<root>/<slug>``; None when it is not attached."""
    parts = PurePosixPath(reference).parts
    if not 1 <= len(parts) <= 2 or any(p in (".", "..") for p in parts):
        return None
    owner, slug = (None, parts[0]) if len(parts) == 1 else parts
    for root in roots:
        kinds = [root / kind for kind in ("datasets", "competitions", "notebooks")]
        candidates = [k / owner / slug for k in kinds] if owner else []
        candidates += [root / "competitions" / slug, root / slug]
        for folder in candidates:
            if folder.is_dir():
                return folder
    return None
