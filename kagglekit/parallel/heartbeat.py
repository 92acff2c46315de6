"""A hang becomes an error that names the process and where it waits.

Each child sends a heartbeat every few seconds from a thread of its own. A beat says where
the child's main thread is (its innermost frames) and how much CPU time the process has used.
The supervisor counts a child as moving while either changes: a Python loop moves its line, and
native work (a matmul, LightGBM growing a tree) burns CPU. A child whose main thread has sat on
one line without using the CPU for ``stall_s`` seconds is waiting for something that does not
come: an OpenMP pool that did not survive a fork, a collective whose peer died, a lock. A child
that stops beating (native code holding the GIL) counts as stalled too. The limit defaults to
the collective timeout, so a slow peer is reported by torch's own error first.
"""
from __future__ import annotations

import os
import sys
import threading
import time

STALL_ENV = "KAGGLEKIT_STALL_S"  # seconds without progress before a child counts as stalled
DEFAULT_STALL_S = 1800.0
BEAT_S = 5.0
MOVING_CPU = 0.05  # CPU seconds per second (5% of a core) that count as work being done
COLLECTIVES = "distributed_c10d.py"  # a frame there: the rank waits for its peers


def stall_limit(default: float | None = None) -> float:
    """``KAGGLEKIT_STALL_S`` when set, else ``default`` (else 30 minutes)."""
    value = os.environ.get(STALL_ENV, "").strip()
    if value:
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{STALL_ENV}={value!r} must be a number of seconds") from None
    return float(default or DEFAULT_STALL_S)


def interval(stall_s: float) -> float:
    """Seconds between beats: several per stall period, at most ``BEAT_S``."""
    return max(0.05, min(BEAT_S, stall_s / 5))


def where(frame, depth: int = 3) -> str:
    """A frame and its callers as "file:line in function", innermost first."""
    parts: list[str] = []
    while frame is not None and len(parts) < depth:
        code = frame.f_code
        path = os.path.join(*code.co_filename.split(os.sep)[-2:]) if code.co_filename else "?"
        parts.append(f"{path}:{frame.f_lineno} in {code.co_name}")
        frame = frame.f_back
    return " <- ".join(parts) or "(not running Python code)"


class Beat(threading.Thread):
    """In the child: ``send(where, cpu_seconds)`` every ``every_s`` until ``stop()``; when the
    parent is gone (the pipe broke), ``orphaned()`` once."""

    def __init__(self, send, every_s: float, orphaned=None):
        super().__init__(name="kagglekit-heartbeat", daemon=True)
        self.send, self.every_s, self.orphaned = send, every_s, orphaned
        self.main = threading.main_thread().ident
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            frame = sys._current_frames().get(self.main) if self.main is not None else None
            try:
                self.send(where(frame), time.process_time())
            except OSError:  # the parent is gone: nobody to report to, nobody to train for
                if self.orphaned is not None:
                    self.orphaned()
                return

    def stop(self) -> None:
        self.done.set()


class Watch:
    """In the parent: when each child last moved, and whether one has stalled."""

    def __init__(self, count: int, stall_s: float):
        now = time.monotonic()
        self.stall_s = stall_s
        self.moved = [now] * count
        self.last: list[tuple | None] = [None] * count

    def beat(self, child: int, at: str, cpu: float) -> None:
        now, before = time.monotonic(), self.last[child]
        if before is None or at != before[0] or cpu - before[1] >= MOVING_CPU * (now - before[2]):
            self.moved[child] = now
        self.last[child] = (at, cpu, now)

    def stalled(self, children) -> int | None:
        """The first of ``children`` that has not moved for ``stall_s``. One that waits in a
        collective waits for a peer: the peer is named (when it stalls too), not the one waiting,
        unless every child waits in one."""
        now = time.monotonic()
        stalled = [c for c in children if now - self.moved[c] > self.stall_s]
        causes = [c for c in stalled if COLLECTIVES not in str((self.last[c] or ("",))[0])]
        if causes:
            return causes[0]
        return stalled[0] if stalled and len(stalled) == len(list(children)) else None

    def seconds_to_check(self, children) -> float:
        """How long until one of ``children`` could have stalled."""
        now = time.monotonic()
        return max(0.0, min((self.moved[c] + self.stall_s - now for c in children), default=self.stall_s))

    def describe(self, child: int, what: str) -> str:
        last = self.last[child]
        doing = (f"its main thread waits at {last[0]}" if last
                 else "it never sent a heartbeat (native code holding the interpreter?)")
        return (f"{what} {child} made no progress for {self.stall_s:.0f} s (the same line of code, "
                f"no CPU time used): {doing}")
