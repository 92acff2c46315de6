"""Functions run in forked processes, supervised: ``run_forked``.

Each child reports through a pipe (its return value pickled, a restart request, or its
traceback), read *before* joining: a tensor put on a multiprocessing queue by a child that then
exits cannot be received, and a large result blocks its child until it is read. The first
failure or death stops every other child; the Stop button (SIGINT) lets them save first; no
process is ever left behind. Nothing forks once this process has opened a GPU driver
(``machine.forksafe``).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait

from ..machine import forksafe, signals
from . import ranklog

STOP_GRACE_S = 120.0  # how long interrupted ranks get to agree on a step and save


class LaunchError(RuntimeError):
    """A rank failed, died, or the launch could not start."""


class RestartRequest(Exception):
    """Raised by a rank that cannot go on with the others but can after a restart (it saved
    where it stood first); ``env``: what the restarted ranks should see."""

    def __init__(self, reason: str, env: dict[str, str]):
        super().__init__(reason)
        self.env = env


class Restarting(Exception):
    """``run_forked``'s answer to a RestartRequest: every process was stopped; start them again
    with ``env``."""

    def __init__(self, reason: str, env: dict[str, str]):
        super().__init__(reason)
        self.env = env


def _child(index: int, body, conn) -> None:
    """One forked process: run ``body(index)``, report the outcome (index 0's return value,
    a restart request, or any index's traceback) through ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (it sends SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: signals.request_stop())  # fit saves, then stops
    status, payload = "ok", None
    try:
        result = body(index)
        payload = pickle.dumps(result if index == 0 else None, protocol=pickle.HIGHEST_PROTOCOL)
    except RestartRequest as request:
        status, payload = "restart", pickle.dumps((str(request), request.env))
    except BaseException:  # noqa: BLE001 - every failure must reach the parent
        status, payload = "error", traceback.format_exc().encode()
        sys.stderr.write(payload.decode())  # into the rank's log file too
    try:
        conn.send_bytes(pickle.dumps((status, index, payload)))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip the parent's atexit handlers (inherited by fork: IPython's, papermill's).
        os._exit(0 if status == "ok" else 1)


def _stop(procs, grace_s: float = 5.0) -> None:
    """SIGTERM every rank (fit saves and stops on it), SIGKILL what is left after ``grace_s``."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _receive(conn, rank: int, procs, outcomes: dict, what: str = "rank") -> bool:
    """Read rank's report if one is waiting; raise on its error or restart. True if read."""
    if not conn.poll():
        return False
    try:
        status, _, body = pickle.loads(conn.recv_bytes())
    except EOFError:
        return False
    if status == "error":
        _stop(procs)
        raise LaunchError(f"{what} {rank} failed{ranklog.pointer(rank)}:\n{body.decode()}")
    if status == "restart":
        _stop(procs)  # the others may be stuck in a collective: SIGKILL after the grace
        raise Restarting(*pickle.loads(body))
    outcomes[rank] = body
    return True


HINTS = {signal.SIGKILL: "most likely the host's out-of-memory killer (a Kaggle session has about "
                        "29 GB for all ranks): lower the batch, the loader workers or what each "
                        "rank keeps in memory",
         signal.SIGSEGV: "a crash in native code (a CUDA, NCCL or extension bug)",
         signal.SIGTERM: "stopped from outside", signal.SIGBUS: "shared memory ran out (/dev/shm)"}


def died(rank: int, exitcode: int | None, what: str = "rank") -> str:
    """A rank's death in words: the signal by name, and what usually sends it."""
    if exitcode is not None and exitcode < 0:
        sig = signal.Signals(-exitcode)
        hint = HINTS.get(sig, "killed by a signal")
        return f"{what} {rank} was killed by {sig.name} (signal {-exitcode}) before reporting: {hint}"
    return f"{what} {rank} exited with code {exitcode} before reporting (a crash in native code?)"


def _supervise(procs, conns, timeout_s: float | None, what: str = "rank"):
    """Collect every rank's outcome; on the first failure stop the others and raise."""
    outcomes: dict = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while len(outcomes) < len(procs):
        waiting = [r for r in range(len(procs)) if r not in outcomes]
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait([conns[r] for r in waiting] + [procs[r].sentinel for r in waiting], left)
        if not ready:
            _stop(procs)
            raise LaunchError(f"{what}s {waiting} did not finish within {timeout_s:.0f}s; "
                              f"all {what}s were stopped")
        for rank in waiting:
            if _receive(conns[rank], rank, procs, outcomes, what):
                continue
            if procs[rank].sentinel in ready:  # exited without a report
                procs[rank].join()
                _stop(procs)
                raise LaunchError(f"{died(rank, procs[rank].exitcode, what)}; all {what}s were stopped"
                                  f"{ranklog.pointer(rank)}")
    return pickle.loads(outcomes[0])


def run_forked(body, count: int, *, join_timeout_s: float | None = None, what: str = "rank"):
    """``body(i)`` in ``count`` forked processes, supervised; index 0's return value.

    Refused before any fork when this process has opened a GPU driver. The first failure or
    death stops every other process and raises LaunchError with its traceback or its signal;
    the Stop button (SIGINT, whatever this process inherited) lets them save first; no process
    is ever left behind.
    """
    forksafe.refuse_if_unsafe("launch()" if what == "rank" else f"a {what}")
    ctx = mp.get_context("fork")
    workers, conns = [], []
    with signals.keyboard_interrupts():
        try:
            for index in range(count):
                parent_end, child_end = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, name=f"kagglekit-{what}{index}", daemon=True,
                                   args=(index, body, child_end))
                proc.start()
                child_end.close()
                workers.append(proc)
                conns.append(parent_end)
            return _supervise(workers, conns, join_timeout_s, what)
        except KeyboardInterrupt:  # the Stop button: every rank saves at the same step, then stops
            _stop(workers, grace_s=STOP_GRACE_S)
            raise
        finally:
            _stop(workers)  # no orphans, whatever happened
            for c in conns:
                c.close()
