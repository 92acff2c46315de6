"""The work cap: one switch that shrinks how much work a run does, never its shape.

``KAGGLEKIT_WORK_CAP=N`` (set by ``make sandbox``, or by hand for a quick look at
a notebook with its full Kaggle parameters): every fit stops after at most N
optimizer steps and N batches per epoch, every other training loop (boosting
rounds, measured cycles, evaluation batches, volumes predicted, repeated final
trainings) after N iterations, and every search runs at most ``TRIALS`` trials.
Sizes, widths, batch sizes, fan-outs and model choices are kept exactly, so a
capped run exercises the very shapes, memory and code paths of the full one. A
fit that hits the cap ends as ``max_steps`` with a final checkpoint: the next
version of the kernel skips it, as it would a finished run.
"""
from __future__ import annotations

import os
from dataclasses import replace

ENV = "KAGGLEKIT_WORK_CAP"
TRIALS = 2


def cap() -> int | None:
    """The cap in steps, or None when the switch is off."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{ENV}={value!r} must be a positive number of steps (or unset)")
    return int(value)


def _smaller(value: int | None, limit: int) -> int:
    return limit if value is None else min(value, limit)


def capped_watch(watch):
    """``fit``'s Watch options with max_steps and limit_batches within the cap."""
    n = cap()
    if n is None:
        return watch
    return replace(watch, max_steps=_smaller(watch.max_steps, n),
                   limit_batches=_smaller(watch.limit_batches, n))


def steps(n: int) -> int:
    """Any other loop's iterations within the cap (boosting rounds, measured cycles,
    repeated trainings)."""
    return n if cap() is None else min(n, cap())


def batches(loader):
    """``loader``'s batches, at most the cap of them (evaluation loops)."""
    import itertools
    n = cap()
    return iter(loader) if n is None else itertools.islice(loader, n)


def trials(n_trials: int) -> int:
    """A search's trial target within the cap."""
    return n_trials if cap() is None else min(n_trials, TRIALS)
