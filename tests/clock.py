"""A virtual clock for the fit loop's deadline decisions: time moves only when a test says so.

A test of "the fit stops with a checkpoint before the deadline" on the real clock asks the
machine to keep 30 ms steps at 30 ms: beside the sandbox's kernels on two cores one step took
a quarter of a second more, the fit overran a 1.5 s budget by 0.19 s and CI failed. What such
a test checks is the loop's arithmetic (the steps' measured time, the save's estimate, the
safety factor), so it runs on a clock that only ``sleep`` advances: compute is free, every
step takes exactly what the test's loss sleeps, and the outcome is the same on any machine.

``install`` swaps the ``time`` module of the kit's modules that decide on time (the budget,
the epoch loop, the checkpoint keeper) for this clock; everything else keeps the real one.
"""
from __future__ import annotations

import time as real_time
from types import ModuleType

from kagglekit.loop import durable, epochs
from kagglekit.machine import budget

DECIDING = (budget, epochs, durable)  # the modules whose clock decides when a fit stops


class VirtualClock:
    """``time``'s functions the kit calls, on a clock that ``sleep`` alone moves."""

    def __init__(self):
        self.elapsed = 0.0
        self._epoch = real_time.time()  # wall time starts where the real one is

    def sleep(self, seconds: float) -> None:
        self.elapsed += seconds

    def time(self) -> float:
        return self._epoch + self.elapsed

    def monotonic(self) -> float:
        return self.elapsed

    perf_counter = monotonic


def install(monkeypatch, modules: tuple[ModuleType, ...] = DECIDING) -> VirtualClock:
    """Give ``modules`` the virtual clock for the test's duration (``monkeypatch`` undoes it)."""
    clock = VirtualClock()
    for module in modules:
        monkeypatch.setattr(module, "time", clock)
    return clock
