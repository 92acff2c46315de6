"""Run a function on every GPU from inside a notebook.

``launch(fn, *args, run=run)`` forks one DDP process per GPU (fork, so functions defined in a
notebook work), calls ``fn(run, *args)`` in each with the run placed on that rank's GPU
(``run.rank``, ``run.device``), returns rank 0's return value, re-raises any rank's exception
with its traceback, stops the other ranks and leaves no process behind. With one device or none
it runs ``fn`` in the calling process; under torchrun it joins torchrun's process group.

Fork is only safe while the calling process has not opened the GPU driver, so the kit reads
GPUs through NVML and every fork is refused, with the fix, when anything opened it
(``machine.forksafe``); the ranks are supervised by ``forked.run_forked``.

A rank may ask for a restart (``RestartRequest``: out of memory under DDP, after saving where
it stood): every rank is stopped and started again, with the request's environment.
"""
from __future__ import annotations

import datetime
import functools
import gc
import multiprocessing as mp
import os
import socket
import sys

import torch
import torch.distributed as dist

from ..machine import gpus as gpus_mod
from . import ranklog, ranks
from .forked import LaunchError, Restarting, run_forked  # noqa: F401 (kk.launcher.LaunchError)

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
MAX_RESTARTS = 8  # each one halves a rank's batch: 8 is a 256-fold smaller batch


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


def _call(fn, run, place: ranks.Place, args, kwargs):
    """``fn(run placed here, *args)`` with a run, else ``fn(*args)``."""
    return fn(run.at(place), *args, **kwargs) if run is not None else fn(*args, **kwargs)


def _ddp_rank(world: int, port: int, backend: str, timeout_s: float, fn, run, args, kwargs,
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
    result = _call(fn, run, ranks.Place(rank, world, rank, device, "ddp"), args, kwargs)
    dist.destroy_process_group()
    return result


def _join_torchrun(fn, run, args, kwargs, timeout_s: float):
    """``fn`` in the process group torchrun set up. A group this call created is torn down
    before returning, in order: what ``fn`` left referencing it (a DDP reducer in a reference
    cycle) freed, every rank done communicating (a barrier), then the group destroyed. Left to
    the interpreter's exit, a gloo group aborted a worker there ("terminate called without an
    active exception"), and the other node's agent waited at torchrun's exit barrier for its
    full timeout."""
    owned = not dist.is_initialized()
    if owned:
        backend = "nccl" if gpus_mod.inventory() else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    result = _call(fn, run, ranks.here("ddp"), args, kwargs)
    if owned:
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    return result


def launch(fn, *args, run=None, strategy: str = "auto", nprocs: int | None = None,
           timeout_s: float = 1800.0, join_timeout_s: float | None = None, **kwargs):
    """Run ``fn`` on every GPU and return rank 0's result.

    Args:
        run: the run context (``kk.start``'s): ``fn(run, *args, **kwargs)`` runs, each rank
            with the run placed on its own GPU (``run.rank``, ``run.device``); its
            ``processes`` parameter sets the process count (``run.launch(fn, ...)`` says the
            same). Without it, ``fn(*args, **kwargs)``.
        strategy: "auto" (DDP with >= 2 GPUs, else one process), "ddp", "dp"
            (DataParallel in this process) or "single".
        nprocs: DDP processes (default: the run's ``processes``, else one per visible GPU).
            On CPU, ``nprocs=2`` runs two gloo processes, which is how CI tests the DDP path.
        timeout_s: how long a collective may wait for the other ranks before it
            fails with an error instead of hanging.
        join_timeout_s: optional limit on the whole run.
    """
    nprocs = nprocs or (run.processes if run is not None else None)
    if _under_torchrun():
        return _join_torchrun(fn, run, args, kwargs, timeout_s)
    gpus = gpus_mod.inventory()
    strategy, procs = resolve_strategy(strategy, len(gpus), nprocs)
    if strategy != "ddp":
        place = ranks.Place(device=torch.device("cuda:0") if gpus else ranks.CPU, strategy=strategy)
        return _call(fn, run, place, args, kwargs)
    backend = "nccl" if gpus else "gloo"
    if backend == "nccl":
        for key, value in NCCL_ENV.items():
            os.environ.setdefault(key, value)
    with _RestartEnvironment() as attempt:
        while True:
            body = functools.partial(_ddp_rank, procs, _free_port(), backend, timeout_s, fn, run,
                                     args, kwargs)
            try:
                return run_forked(body, procs, join_timeout_s=join_timeout_s)
            except Restarting as restart:
                attempt(restart)


class _RestartEnvironment:
    """Restarts of one launch: each request's environment set for the next ranks (fork
    inherits it), all of it taken back when the launch ends."""

    def __enter__(self):
        self.saved, self.count = {}, 0
        return self.attempt

    def attempt(self, restart: Restarting) -> None:
        self.count += 1
        if self.count > MAX_RESTARTS:
            raise LaunchError(f"{restart} (restart {self.count}: giving up after {MAX_RESTARTS})")
        print(f"kagglekit: {restart}; restarting every rank", file=sys.stderr, flush=True)
        for key, value in restart.env.items():
            self.saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def __exit__(self, *exc) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def isolated(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a forked process of its own where a GPU is visible, its
    return value pickled back; here otherwise.

    For GPU libraries that open the driver themselves (LightGBM's OpenCL, XGBoost's CUDA): in
    the notebook's process they would break every later fork-based ``launch``; in a child the
    driver closes with it. Inside a launched rank or a search worker (a process of its own
    already) it runs in place. Functions defined in the notebook work (fork), and the return value
    must pickle (a LightGBM or XGBoost Booster does).
    """
    if not gpus_mod.inventory() or mp.current_process().daemon:  # no GPU, or a kit worker already
        return fn(*args, **kwargs)
    return run_forked(lambda _: fn(*args, **kwargs), 1, what="GPU worker")
