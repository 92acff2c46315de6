"""Run a function on every GPU from inside a notebook.

``launch(fn, *args, run=run)`` starts one DDP process per GPU, calls ``fn(run, *args)`` in each
with the run placed on that rank's GPU (``run.rank``, ``run.device``), returns rank 0's return
value, re-raises any rank's exception with its traceback, stops the other ranks and leaves no
process behind. With one device or none it runs ``fn`` in the calling process; under torchrun
it joins torchrun's process group.

The ranks are forked from a clean process (``forkserver``), never from the notebook's: a
notebook that already put a tensor on ``cuda:0`` or trained LightGBM can still launch on both
GPUs. ``fn`` and what it refers to travel by value (functions defined in the notebook work);
the ranks are supervised by ``forked.run_forked``.

A rank may ask for a restart (``RestartRequest``: out of memory under DDP, after saving where
it stood): every rank is stopped and started again, with the request's environment.
"""
from __future__ import annotations

import datetime
import functools
import gc
import os
import socket
import sys

import torch
import torch.distributed as dist

from ..machine import ascard, gpus as gpus_mod
from . import heartbeat, ranklog, ranks
from .forked import LaunchError, Restarting, in_worker, run_forked  # noqa: F401 (kk.launcher.LaunchError)

STRATEGIES = ("auto", "ddp", "dp", "single")
# torch's CPU threads in a rank: its heavy work is on its GPU, and Kaggle's 4 vCPUs are shared
# by two ranks and their loader workers.
RANK_THREADS = 1
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


def _ddp_rank(world: int, port: int, backend: str, timeout_s: float, cards: int, fn, run, args,
              kwargs, rank: int):
    """Body of one DDP rank: join the group, run ``fn``, leave the group. Rank r trains on card
    r (of ``cards``; gloo ranks may share one: r modulo the cards)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    ranklog.attach(rank)
    device = ranks.gpu_or_cpu(rank % max(1, cards))
    if device.type == "cuda":
        torch.cuda.set_device(device)
        ascard.confine(device)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    result = _call(fn, run, ranks.Place(rank, world, rank, device, "ddp"), args, kwargs)
    _leave_group()
    return result


def _leave_group() -> None:
    """Tear the group down in order: what ``fn`` left referencing it (a DDP reducer in a reference
    cycle) freed, every rank done communicating (a barrier: the backend's threads idle), then the
    group destroyed. Left to a later garbage collection, the reducer held the last reference: the
    gloo group's destructor joined its worker thread with the interpreter's lock held while that
    thread waited for the lock to free a finished allreduce's tensors, and the rank hung (1 run in
    6 of tests/test_launch.py beside a CPU burner; py-spy showed both stacks). Under torchrun the
    other node's agent also waited at its exit barrier for the full timeout."""
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def take_local_device() -> torch.device:
    """This rank's device under torchrun (cuda:LOCAL_RANK), made current before anything opens
    a context: otherwise every rank's NCCL and caching allocator start on cuda:0."""
    device = ranks.default_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        ascard.confine(device)
    return device


def _join_torchrun(fn, run, args, kwargs, timeout_s: float):
    """``fn`` in the process group torchrun set up. A group this call created is torn down
    before returning (``_leave_group``). Left to the interpreter's exit, a gloo group aborted a
    worker there ("terminate called without an active exception")."""
    owned = not dist.is_initialized()
    device = take_local_device()
    if owned:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    result = _call(fn, run, ranks.here("ddp"), args, kwargs)
    if owned:
        _leave_group()
    return result


def launch(fn, *args, run=None, strategy: str = "auto", nprocs: int | None = None,
           timeout_s: float = 1800.0, join_timeout_s: float | None = None,
           backend: str | None = None, **kwargs):
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
        backend: the process group's: "nccl" where real GPUs are, else "gloo" (CPU tensors,
            and the emulation); "gloo" on GPUs lets more ranks than cards share them (the GPU
            check runs two ranks on one card).
    """
    nprocs = nprocs or (run.processes if run is not None else None)
    if _under_torchrun():
        return _join_torchrun(fn, run, args, kwargs, timeout_s)
    cards = len(gpus_mod.inventory())
    backend = backend or ("nccl" if ranks.cuda_visible() else "gloo")
    strategy, procs = resolve_strategy(strategy, cards if backend == "nccl" else 0, nprocs or cards)
    if strategy != "ddp":
        return _call(fn, run, ranks.Place(device=ranks.gpu_or_cpu(0), strategy=strategy), args, kwargs)
    if backend == "nccl":
        for key, value in NCCL_ENV.items():
            os.environ.setdefault(key, value)
    with _RestartEnvironment() as attempt:
        while True:
            body = functools.partial(_ddp_rank, procs, _free_port(), backend, timeout_s, cards, fn,
                                     run, args, kwargs)
            try:
                return run_forked(body, procs, join_timeout_s=join_timeout_s,
                                  stall_s=heartbeat.stall_limit(timeout_s + 60), threads=RANK_THREADS)
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


def isolated(fn, *args, timeout_s: float | None = None, **kwargs):
    """``fn(*args, **kwargs)`` in a process of its own where a GPU is visible (or emulated),
    its return value sent back; here otherwise.

    For GPU libraries that open the driver themselves (LightGBM's OpenCL, XGBoost's CUDA): the
    driver and the memory they take close with the child, and this process's own GPU memory
    stays free for the ranks. Inside a launched rank or a search worker (a process of its own
    already) it runs in place. The child is forked from the clean server: it may use every
    core with OpenMP whatever this process ran before. ``fn`` travels by value (functions
    defined in the notebook work); the return value must pickle (a LightGBM or XGBoost Booster
    does). ``timeout_s``: a limit on the whole call (a stall is caught without one).
    """
    if not gpus_mod.inventory() or in_worker():  # no GPU, or a kit worker already
        return fn(*args, **kwargs)
    from ..machine.env import real_cpus
    return run_forked(lambda _: on_the_host(fn(*args, **kwargs)), 1, what="GPU worker",
                      join_timeout_s=timeout_s, threads=real_cpus())


def on_the_host(model):
    """An XGBoost model (Booster or scikit-learn wrapper) set to predict on the CPU before it
    leaves its process: its pickle carries its device, and unpickled as "cuda" it would open
    the driver in the notebook's process, taking GPU memory the ranks need. Anything else as is."""
    if not type(model).__module__.startswith("xgboost"):
        return model
    if hasattr(model, "get_booster"):  # XGBRegressor, XGBClassifier...
        model.set_params(device="cpu")
        model.get_booster().set_param({"device": "cpu"})
    elif hasattr(model, "set_param"):
        model.set_param({"device": "cpu"})
    return model
