"""Run a function on every GPU from inside a notebook.

``launch(fn, *args)`` forks one DDP process per GPU (fork, so functions defined
in a notebook work), returns rank 0's return value to the caller, re-raises any
rank's exception with its traceback, stops the other ranks and leaves no process
behind. With one device or none it runs ``fn`` in the calling process; under
torchrun it just runs ``fn``.

Fork is only safe while the calling process holds no CUDA context, so the kit
reads GPUs through NVML and ``launch`` refuses, with the fix, if CUDA was
initialised. Results travel as pickled bytes through a pipe read *before*
joining: a tensor put on a multiprocessing queue by a child that then exits
cannot be received, and a large result blocks its child until it is read.
"""
from __future__ import annotations

import datetime
import functools
import multiprocessing as mp
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from multiprocessing.connection import wait

import torch
import torch.distributed as dist

from ..machine import signals
from . import ranklog, ranks
from ..machine import gpus as gpus_mod

STRATEGIES = ("auto", "ddp", "dp", "single")
# torch's CPU ops in a forked process run on one thread. GNU OpenMP (torch's) is not fork-safe:
# once the notebook's process has run a parallel region (any multithreaded CPU op: data
# preparation, a matmul), a child that opens its own with more than one thread waits forever
# for pool threads that did not survive the fork (measured: a 300 x 300 matmul on 2 threads
# hangs; on 1 it returns). A rank's heavy work is on its GPU; DataLoader workers use one too.
FORKED_THREADS = 1
# T4 x2 on Kaggle: PCIe only, no NVLink; P2P over PCIe between the two T4s has been
# reported to hang NCCL in some containers, and there is no InfiniBand.
NCCL_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}


class LaunchError(RuntimeError):
    """A rank failed, died, or the launch could not start."""


CUDA_INITIALISED = (
    "launch() cannot fork worker processes: CUDA is already initialised in this notebook's "
    "process (something called torch.cuda.* or moved a tensor to the GPU before launch). "
    "Restart the kernel, and keep every CUDA call (model.cuda(), torch.cuda.*, .to('cuda')) "
    "inside the launched function. kagglekit's own env report never initialises CUDA.")


# The context lives in ``ranks``; ``launcher.context()`` is kept as the public name.
context = ranks.context
Context = ranks.Context
_set_context = ranks.set_context


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))


def resolve_strategy(strategy: str, n_gpus: int, nprocs: int | None) -> tuple[str, int]:
    """(strategy, processes) for ``strategy`` on ``n_gpus`` GPUs."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} must be one of {STRATEGIES}")
    if strategy == "auto":
        strategy = "ddp" if (nprocs or n_gpus) >= 2 else "single"
    if strategy == "ddp":
        procs = nprocs or n_gpus
        if n_gpus and procs > n_gpus:
            raise ValueError(f"nprocs={procs} but only {n_gpus} GPU(s) are visible")
        return ("ddp", procs) if procs >= 2 else ("single", 1)
    return strategy, 1


def _ddp_rank(world: int, port: int, backend: str, timeout_s: float, fn, args, kwargs,
              rank: int):
    """Body of one forked DDP rank: join the group, run ``fn``, leave the group."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    ranklog.attach(rank)
    torch.set_num_threads(FORKED_THREADS)
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device(f"cuda:{rank}")
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    ranks.set_context(ranks.Context("ddp", rank, rank, world, device))
    result = fn(*args, **kwargs)
    dist.destroy_process_group()
    return result


def _child(index: int, body, conn) -> None:
    """One forked process: run ``body(index)``, report the outcome (index 0's return value,
    or any index's traceback) through ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (it sends SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: signals.request_stop())  # fit saves, then stops
    status, payload = "ok", None
    try:
        result = body(index)
        payload = pickle.dumps(result if index == 0 else None, protocol=pickle.HIGHEST_PROTOCOL)
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



STOP_GRACE_S = 120.0  # how long interrupted ranks get to agree on a step and save


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
    """Read rank's report if one is waiting; raise on its error. True if read."""
    if not conn.poll():
        return False
    try:
        status, _, body = pickle.loads(conn.recv_bytes())
    except EOFError:
        return False
    if status == "error":
        _stop(procs)
        raise LaunchError(f"{what} {rank} failed{ranklog.pointer(rank)}:\n{body.decode()}")
    outcomes[rank] = body
    return True


HINTS = {signal.SIGKILL: "most likely the host's out-of-memory killer (a Kaggle session has about "
                        "31 GB for all ranks): lower the batch, the loader workers or what each "
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


def launch(fn, *args, strategy: str = "auto", nprocs: int | None = None,
           timeout_s: float = 1800.0, join_timeout_s: float | None = None, run=None, **kwargs):
    """Run ``fn(*args, **kwargs)`` on every GPU and return rank 0's result.

    Args:
        run: the run context (``kk.start``'s); given, ``fn(run, *args, **kwargs)`` runs
            (``run.launch(fn, ...)`` says the same).
        strategy: "auto" (DDP with >= 2 GPUs, else one process), "ddp", "dp"
            (DataParallel in this process) or "single".
        nprocs: DDP processes (default: one per visible GPU). On CPU, ``nprocs=2``
            runs two gloo processes, which is how CI tests the DDP path.
        timeout_s: how long a collective may wait for the other ranks before it
            fails with an error instead of hanging.
        join_timeout_s: optional limit on the whole run.
    """
    if run is not None:
        args = (run, *args)
    if _under_torchrun():
        if not dist.is_initialized():
            backend = "nccl" if gpus_mod.inventory() else "gloo"
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        local = int(os.environ["LOCAL_RANK"])
        device = torch.device(f"cuda:{local}") if gpus_mod.inventory() else torch.device("cpu")
        _set_context(Context("ddp", dist.get_rank(), local, dist.get_world_size(), device))
        return fn(*args, **kwargs)
    gpus = gpus_mod.inventory()
    strategy, procs = resolve_strategy(strategy, len(gpus), nprocs)
    if strategy != "ddp":
        device = torch.device("cuda:0") if gpus else torch.device("cpu")
        previous = context()
        _set_context(Context(strategy, 0, 0, 1, device))
        try:
            return fn(*args, **kwargs)
        finally:
            _set_context(previous)
    return _fork(fn, args, kwargs, procs, "nccl" if gpus else "gloo", timeout_s, join_timeout_s)


def _fork(fn, args, kwargs, procs: int, backend: str, timeout_s: float, join_timeout_s):
    if gpus_mod.cuda_initialised():
        raise LaunchError(CUDA_INITIALISED)
    if backend == "nccl":
        for key, value in NCCL_ENV.items():
            os.environ.setdefault(key, value)
    body = functools.partial(_ddp_rank, procs, _free_port(), backend, timeout_s, fn, args, kwargs)
    return run_forked(body, procs, join_timeout_s=join_timeout_s)


def run_forked(body, count: int, *, join_timeout_s: float | None = None, what: str = "rank"):
    """``body(i)`` in ``count`` forked processes, supervised; index 0's return value.

    The first failure or death stops every other process and raises LaunchError with
    its traceback or its signal; the Stop button lets them save first; no process is
    ever left behind.
    """
    ctx = mp.get_context("fork")
    workers, conns = [], []
    for index in range(count):
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, name=f"kagglekit-{what}{index}", daemon=True,
                           args=(index, body, child_end))
        proc.start()
        child_end.close()
        workers.append(proc)
        conns.append(parent_end)
    try:
        return _supervise(workers, conns, join_timeout_s, what)
    except KeyboardInterrupt:  # the Stop button: every rank saves at the same step, then stops
        _stop(workers, grace_s=STOP_GRACE_S)
        raise
    finally:
        _stop(workers)  # no orphans, whatever happened
        for c in conns:
            c.close()


def effective_batch(per_gpu: int, accumulate: int = 1, world_size: int | None = None,
                    verbose: bool = True) -> int:
    """Samples per optimizer step over all GPUs: per-GPU batch x GPUs x accumulation."""
    world = world_size or max(1, len(gpus_mod.inventory()))
    total = per_gpu * world * accumulate
    if verbose:
        print(f"effective batch: {per_gpu} per GPU x {world} GPU(s) x {accumulate} "
              f"accumulation step(s) = {total}")
    return total


def scale_lr(lr: float, base_batch: int, batch: int, rule: str = "linear") -> float:
    """Learning rate for ``batch`` given one tuned at ``base_batch``.

    "linear" (Goyal et al., for SGD) multiplies by batch/base; "sqrt" (often better
    for Adam-style optimizers) by its square root.
    """
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"rule={rule!r} must be 'linear' or 'sqrt'")
    ratio = batch / base_batch
    return lr * (ratio if rule == "linear" else ratio ** 0.5)
