"""Who this process is in a run: its rank, its device, and how the ranks agree.

The one owner of these facts. ``launch`` (or torchrun) sets the context; fit,
the loaders, metrics and checkpoints read it here instead of asking
torch.distributed each on their own.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Context:
    """How the current process takes part in training."""
    strategy: str = "single"  # "ddp", "dp" or "single"
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_context = Context()


def context() -> Context:
    """The launch context of this process (rank, world size, device, strategy)."""
    return _context


def set_context(ctx: Context) -> None:
    global _context
    _context = ctx


def distributed() -> bool:
    """Inside a process group (a DDP rank)?"""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if distributed() else 1


def is_main() -> bool:
    """The rank that writes files and prints (rank 0, or the only process)."""
    return rank() == 0


def agree(flags: list[bool], device: torch.device) -> list[bool]:
    """Each flag true on every rank if it is true on any (one all-reduce for all).

    Ranks must take the same decision to stop, save or shrink a batch, or a
    collective hangs.
    """
    if not distributed():
        return flags
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def default_device() -> torch.device:
    """The launch context's device; else cuda:LOCAL_RANK when there is a GPU, else CPU."""
    from ..machine.gpus import inventory
    ctx = context()
    if ctx.strategy != "single" or ctx.device.type == "cuda":
        return ctx.device
    if not inventory():
        return torch.device("cpu")
    return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DDP inside a process group; DataParallel under launch(strategy="dp")."""
    ddp = torch.nn.parallel.DistributedDataParallel
    if distributed() and not isinstance(model, ddp):
        return ddp(model, device_ids=[device.index] if device.type == "cuda" else None)
    if context().strategy == "dp" and device.type == "cuda" and torch.cuda.device_count() > 1:
        return torch.nn.DataParallel(model)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The bare module under DDP / DataParallel / torch.compile wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        else:
            return model
