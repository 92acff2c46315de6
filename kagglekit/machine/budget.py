"""Wall-clock budgets: stop cleanly, with a checkpoint, before a deadline.

A Kaggle GPU session is killed at about 12 hours and a killed session loses
*all* its outputs, so on Kaggle the default deadline is the session limit minus
a safety margin, counted from the kernel's start (not from the fit call).
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
import time
from pathlib import Path

KAGGLE_SESSION_S = 12 * 3600
KAGGLE_MARGIN_S = 20 * 60  # time left to save outputs and render the notebook


class Unfinished(Exception):
    """A unit of work stopped before its end at the session's deadline: not done, nothing
    cached; the next session (the kernel's next version) resumes it from its checkpoints.

    One type wherever the work ran: a launched rank, a search worker or an ``isolated`` child
    raising it reaches the notebook as ``Unfinished`` (``forked`` carries it by type)."""


# Set while a search trial runs: a fit the deadline cuts short there raises Unfinished even
# without a unit's checkpoints, since a trial's value is its whole training's or nothing.
_whole_or_nothing = contextvars.ContextVar("whole_or_nothing", default=False)


@contextlib.contextmanager
def whole_or_nothing():
    """Within it, a fit cut short by the deadline raises ``Unfinished``: its partial result is
    of no use (a search trial, whose value would be a shorter training's)."""
    token = _whole_or_nothing.set(True)
    try:
        yield
    finally:
        _whole_or_nothing.reset(token)


def partial_unwanted() -> bool:
    """Is a fit cut short by the deadline to raise ``Unfinished`` here (``whole_or_nothing``)?"""
    return _whole_or_nothing.get()


def process_start_time(pid: int | str = "self") -> float | None:
    """Unix time at which ``pid`` started, read from /proc (None where unavailable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5), counted after the command name
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def kernel_start_time() -> float:
    """When this Kaggle session began: the container's first process, else this one. In a
    simulated Kaggle (``KAGGLEKIT_ROOT``) this process's start: the machine's first process
    may have started hours before, and its 12 hours must not end a simulated session."""
    from .env import where
    pids: tuple[int | str, ...] = ("self",) if where().simulated else (1, "self")
    starts = [t for t in map(process_start_time, pids) if t]
    return min(starts) if starts else time.time()


class Budget:
    """A deadline on the wall clock.

    Args:
        seconds: length of the budget from now (None: no deadline).
        deadline: an absolute unix time instead of ``seconds``.
    """

    def __init__(self, seconds: float | None = None, *, deadline: float | None = None):
        if seconds is not None and deadline is not None:
            raise ValueError("give either seconds or deadline, not both")
        self.deadline = deadline if deadline is not None else (
            time.time() + seconds if seconds is not None else None)

    @classmethod
    def for_kaggle(cls, session_s: float = KAGGLE_SESSION_S,
                   margin_s: float = KAGGLE_MARGIN_S) -> Budget:
        return cls(deadline=kernel_start_time() + session_s - margin_s)

    @classmethod
    def resolve(cls, value) -> Budget:
        """``None`` -> the Kaggle default on Kaggle, unlimited elsewhere; a number ->
        that many seconds from now; a Budget -> itself."""
        if isinstance(value, Budget):
            return value
        if value is None:
            from .env import where
            return cls.for_kaggle() if where().on_kaggle else cls()
        return cls(float(value))

    def remaining(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.time()

    def allows(self, seconds: float) -> bool:
        """Is there time for ``seconds`` more of work before the deadline?"""
        return self.remaining() > seconds

    def __repr__(self) -> str:
        left = self.remaining()
        return "Budget(unlimited)" if left == float("inf") else f"Budget({left:.0f}s left)"
