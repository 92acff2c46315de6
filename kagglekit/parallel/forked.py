"""Functions run in processes of their own, supervised: ``run_forked``.

Each child is forked from the kit's clean process (``forkserver``), not from the notebook's, so
what the notebook did before (a GPU opened, LightGBM trained) cannot break it. A child reports
through a pipe: heartbeats while it works (``heartbeat``), then its return value (index 0's), a
restart request, ``Unfinished`` (raised here by type once every child has reported), or its
traceback. The reports are read *before* joining, because a large
result blocks its child until it is read. The first failure, death or stall stops every other
child; the Stop button (SIGINT) lets them save first. No process is ever left behind: the
supervisor stops its children whatever happens, and a child whose notebook process died ends
with the server (SIGTERM, so a fit saves first).
"""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait

from ..machine import env as machine_env, inputs, signals
from ..machine.budget import Unfinished
from . import forkserver, heartbeat, ranklog

STOP_GRACE_ENV = "KAGGLEKIT_STOP_GRACE_S"  # how long interrupted ranks get to agree and save
WORKER_ENV = "KAGGLEKIT_WORKER"  # set in every child: isolated() inside one runs in place
PR_SET_PDEATHSIG = 1


class LaunchError(RuntimeError):
    """A rank failed, died, stalled, or the launch could not start."""


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


def in_worker() -> bool:
    """Is this process one the kit started (a rank, a search worker, an isolated child)?"""
    return os.environ.get(WORKER_ENV) == "1"


def stop_grace_s() -> float:
    """Seconds a stopped child gets to save (``KAGGLEKIT_STOP_GRACE_S``, default 120)."""
    return float(os.environ.get(STOP_GRACE_ENV, "").strip() or 120.0)


def _orphaned() -> None:
    """The notebook's process is gone: ask the fit to save and stop, and end the process if
    its function does not return within the grace (it trains for nobody)."""
    signals.request_stop()
    time.sleep(stop_grace_s())
    os._exit(1)


def end_with_parent(sig: int = signal.SIGTERM) -> None:
    """``sig`` to this process when its parent ends. A child of the fork server gets SIGTERM
    (the server ends with the notebook's process): a fit saves and stops instead of training
    for nobody."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):  # not Linux: the supervisor's stop is the only guard
        pass


class _Pipe:
    """The child's end of its pipe, shared by the heartbeat thread and the final report."""

    def __init__(self, conn, index: int):
        self.conn, self.index, self.lock = conn, index, threading.Lock()

    def send(self, status: str, payload) -> None:
        message = pickle.dumps((status, self.index, payload), protocol=pickle.HIGHEST_PROTOCOL)
        with self.lock:
            self.conn.send_bytes(message)

    def beat(self, at: str, cpu: float) -> None:
        self.send("beat", (at, cpu))


def _child(index: int, env: dict, payload: bytes, walked: bytes, conn, threads: int,
           beat_s: float, every: bool = False) -> None:
    """One child: the notebook's environment, ``body(index)`` loaded and run (with the attached
    inputs the parent walked), its outcome reported (index 0's return value, or every index's
    with ``every``; a restart request, or any index's traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (it sends SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: signals.request_stop())  # fit saves, then stops
    end_with_parent()
    os.environ.clear()
    os.environ.update(env, **{WORKER_ENV: "1"})
    import torch
    torch.set_num_threads(machine_env.thread_cap(threads, env))
    pipe = _Pipe(conn, index)
    beat = heartbeat.Beat(pipe.beat, beat_s, orphaned=_orphaned)
    beat.start()
    status, out = "ok", None  # out: the packed result, or what went wrong
    try:
        inputs.adopt(forkserver.unpack(walked))
        result = forkserver.unpack(payload)(index)
        out = forkserver.pack(result if index == 0 or every else None, "a result")
    except RestartRequest as request:
        status, out = "restart", (str(request), request.env)  # type: ignore[assignment]
    except Unfinished as stopped:  # not a failure: every rank stopped at the deadline, saved
        status, out = "unfinished", str(stopped)  # type: ignore[assignment]
    except BaseException:  # noqa: BLE001 - every failure must reach the parent
        status, text = "error", traceback.format_exc()
        out = text  # type: ignore[assignment]
        sys.stderr.write(text)  # into the rank's log file too
    beat.stop()
    try:
        pipe.send(status, out)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # multiprocessing's own exit follows: its finalizers release what the child made (tqdm's
    # lock: the resource tracker would report it leaked), daemonic loader workers are stopped.
    sys.exit(0 if status in ("ok", "unfinished") else 1)


def _stop(procs, grace_s: float = 5.0) -> None:
    """SIGTERM every child (fit saves and stops on it), SIGKILL what is left after ``grace_s``."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


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


class _Supervisor:
    """Reads every child's reports until each has sent its outcome; on the first failure,
    death or stall, stops the others and raises."""

    def __init__(self, procs, conns, what: str, watch: heartbeat.Watch):
        self.procs, self.conns, self.what, self.watch = procs, conns, what, watch
        self.outcomes: dict = {}

    def fail(self, message: str, rank: int | None = None) -> LaunchError:
        _stop(self.procs)
        pointer = ranklog.pointer(rank) if rank is not None else ""
        return LaunchError(f"{message}; all {self.what}s were stopped{pointer}")

    def reports(self, rank: int):
        """(status, body) of every report waiting on ``rank``'s pipe until its outcome; beats
        are noted here, outcomes kept (restarts and errors are the caller's)."""
        conn = self.conns[rank]
        while rank not in self.outcomes and conn.poll():
            try:
                status, _, body = pickle.loads(conn.recv_bytes())
            except EOFError:
                return
            if status == "beat":
                self.watch.beat(rank, *body)
            elif status == "unfinished":  # an outcome: the others are saving at the same step
                self.outcomes[rank] = Unfinished(body)
            elif status == "ok":
                self.outcomes[rank] = body
            yield status, body

    def receive(self, rank: int) -> None:
        """Every report waiting on ``rank``'s pipe: beats noted, an outcome kept or raised."""
        for status, body in self.reports(rank):
            if status == "error":
                left = self.left_first(but=rank)
                _stop(self.procs)
                if isinstance(left, Unfinished):  # the error followed: a peer stopped at the deadline
                    raise Unfinished(f"{left}; {self.what} {rank} failed after it{ranklog.pointer(rank)}")
                if left is not None:  # the error followed: its collective lost the rank that left
                    raise Restarting(*left)
                raise LaunchError(f"{self.what} {rank} failed{ranklog.pointer(rank)}:\n{body}")
            if status == "restart":
                _stop(self.procs)  # the others may be stuck in a collective: SIGKILL after the grace
                raise Restarting(*body)

    def left_first(self, but: int):
        """A restart another rank already asked for, or the ``Unfinished`` another rank already
        stopped with; else None. A rank leaving either way reports before its sockets close, so
        the error it causes in a peer's collective ("Connection closed by peer") always reaches
        the pipes after its report; read in rank order, the peer's error can come first (a lent
        H100's two ranks on one card; a rank stopping while its peer still joined the group)."""
        for other in range(len(self.conns)):
            for status, body in self.reports(other) if other != but else ():
                if status == "restart":
                    return body
        stopped = [o for r, o in sorted(self.outcomes.items()) if r != but and isinstance(o, Unfinished)]
        return stopped[0] if stopped else None

    def run(self, timeout_s: float | None, every: bool = False):
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(self.outcomes) < len(self.procs):
            waiting = [r for r in range(len(self.procs)) if r not in self.outcomes]
            left = self.watch.seconds_to_check(waiting)
            if deadline is not None:
                left = min(left, max(0.0, deadline - time.monotonic()))
            ready = wait([self.conns[r] for r in waiting] + [self.procs[r].sentinel for r in waiting],
                         left + 0.01)
            for rank in waiting:
                self.receive(rank)
                if rank not in self.outcomes and self.procs[rank].sentinel in ready:
                    self.procs[rank].join()  # exited without a report
                    raise self.fail(died(rank, self.procs[rank].exitcode, self.what), rank)
            self.check_time(waiting, deadline, timeout_s)
        stopped = [o for _, o in sorted(self.outcomes.items()) if isinstance(o, Unfinished)]
        if stopped:
            raise stopped[0]  # by type: the unit that ran here is not done
        if every:
            return [forkserver.unpack(o) for _, o in sorted(self.outcomes.items())]
        return forkserver.unpack(self.outcomes[0])

    def check_time(self, waiting, deadline, timeout_s) -> None:
        waiting = [r for r in waiting if r not in self.outcomes]
        stalled = self.watch.stalled(waiting)
        if stalled is not None:
            raise self.fail(self.watch.describe(stalled, self.what), stalled)
        if deadline is not None and waiting and time.monotonic() >= deadline:
            raise self.fail(f"{self.what}s {waiting} did not finish within {timeout_s:.0f}s")


def run_forked(body, count: int, *, join_timeout_s: float | None = None, what: str = "rank",
               stall_s: float | None = None, threads: int = 1, every: bool = False):
    """``body(i)`` in ``count`` processes forked from the clean server; index 0's return value
    (``every``: all of them, in index order).

    ``body`` travels by value (functions defined in the notebook work). The first failure,
    death or stall (``stall_s`` without progress, default ``heartbeat.stall_limit()``) stops
    every other process and raises LaunchError with its traceback, signal or position; the Stop
    button (SIGINT, whatever this process inherited) lets them save first; no process is ever
    left behind. ``threads``: torch's CPU threads in each.
    """
    payload = forkserver.pack(body, "launch()" if what == "rank" else f"a {what}")
    walked = forkserver.pack(inputs.walked(), "the attached inputs' index")
    stall_s = heartbeat.stall_limit(stall_s)
    ctx = forkserver.context()
    workers, conns = [], []
    with signals.keyboard_interrupts():
        try:
            for index in range(count):
                parent_end, child_end = ctx.Pipe(duplex=False)
                proc = forkserver.Process(target=_child, name=f"kagglekit-{what}{index}", args=(
                    index, dict(os.environ), payload, walked, child_end, threads, heartbeat.interval(stall_s), every))
                proc.start()
                child_end.close()
                workers.append(proc)
                conns.append(parent_end)
            watch = heartbeat.Watch(count, stall_s)
            return _Supervisor(workers, conns, what, watch).run(join_timeout_s, every)
        except KeyboardInterrupt:  # the Stop button: every rank saves at the same step, then stops
            _stop(workers, grace_s=stop_grace_s())
            raise
        finally:
            _stop(workers)  # no orphans, whatever happened
            for c in conns:
                c.close()
