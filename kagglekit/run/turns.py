"""Units of work in turn within the session's time: the one loop that cross-validation's folds
(``folds``) and the work pool's workers (``workpool``) both run.

A unit is started only when the time left holds it: its estimate is the median time of the units
computed here this session (per unit of ``size`` when the units differ in size: an LLM shard's
tokens), before the first an earlier session's (or none: it starts). A unit
done before (a cache hit) costs nothing and never counts in the estimate. A unit that raises
``Unfinished`` ends the turn: it and every unit after it are left for the next version.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from ..machine.budget import Unfinished
from .unit import Unit

Work = TypeVar("Work")


def in_turn(jobs: Iterable[tuple[Unit, Work]], do: Callable[[Unit, Work], object], *, who: str,
            earlier_s: float | None = None, per_version: int = 0,
            size: Callable[[Unit, Work], float] | None = None) -> Iterator[tuple[Unit, object]]:
    """``(unit, do(unit, work))`` for each job in order, while the session's time holds the next
    (``per_version``: at most that many computed this session; ``size``: each job's size, when
    their times go with it); ``who`` names the loop in what it says when it stops early."""
    spent: list[float] = []  # seconds per unit of size (per unit without sizes)
    for unit, work in jobs:
        done = unit.done
        scale = size(unit, work) if size is not None else 1.0
        if not done and not _room(unit, [s * scale for s in spent], earlier_s, per_version):
            print(f"kagglekit {who}: {unit.name} left for the next version (the session's time "
                  "cannot hold it)", flush=True)
            return
        started = time.monotonic()
        try:
            value = do(unit, work)
        except Unfinished as stopped:
            print(f"kagglekit {who}: {unit.name}: {stopped}", flush=True)
            return
        if not done:
            spent.append((time.monotonic() - started) / max(scale, 1e-12))
        yield unit, value


def estimate_s(spent: list[float], earlier_s: float | None) -> float | None:
    """A unit's expected time: the median of this session's, else an earlier session's."""
    return statistics.median(spent) if spent else earlier_s


def _room(unit: Unit, spent: list[float], earlier_s: float | None, per_version: int) -> bool:
    if per_version and len(spent) >= per_version:
        return False
    return unit.fits(estimate_s(spent, earlier_s))
