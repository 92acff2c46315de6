"""Who this process is in a run: its rank, its device, and how the ranks agree.

Rank and world size are torch.distributed's: the process group is the one truth, asked
directly. Where a rank trains (its device, and whether it is one of several DDP processes or
drives DataParallel) is a ``Place``, carried by the run (``Run.place``) that ``launch`` hands
to each rank. Nothing here is module state.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

CPU = torch.device("cpu")


@dataclass(frozen=True)
class Place:
    """Where one process of a run trains."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = CPU
    strategy: str = "single"  # "ddp" (one process per GPU), "dp" (DataParallel here) or "single"

    @property
    def is_main(self) -> bool:
        """The rank that writes files and prints."""
        return self.rank == 0


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


def default_device() -> torch.device:
    """cuda:LOCAL_RANK (set by ``launch`` and torchrun) where a GPU is visible, else the CPU;
    read from NVML, never by initialising CUDA."""
    return gpu_or_cpu(int(os.environ.get("LOCAL_RANK", 0)))


def cuda_visible() -> bool:
    """Are there real GPUs to compute on? (Not under the emulation: its T4s compute on the
    CPU.) Read from NVML, never by initialising CUDA."""
    from ..machine import emulate
    from ..machine.gpus import inventory
    return bool(inventory()) and not emulate.active()


def gpu_or_cpu(index: int) -> torch.device:
    """cuda:<index> where real GPUs are visible, else the CPU."""
    return torch.device(f"cuda:{index}") if cuda_visible() else CPU


def here(strategy: str = "single") -> Place:
    """This process's place, from the process group and the environment."""
    return Place(rank(), world_size(), int(os.environ.get("LOCAL_RANK", 0)), default_device(),
                 "ddp" if distributed() else strategy)


def agree(flags: list[bool], device: torch.device) -> list[bool]:
    """Each flag true on every rank if it is true on any (one all-reduce for all).

    Ranks must take the same decision to stop or save, or a collective hangs.
    """
    if not distributed():
        return flags
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def from_main(value, device: torch.device):
    """Rank 0's ``value`` on every rank (one broadcast; ``value`` itself outside DDP): what the
    ranks must share, as the checkpoint they resume from, is chosen once."""
    if not distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    return box[0]


def wrap(model: torch.nn.Module, device: torch.device, strategy: str = "single") -> torch.nn.Module:
    """DDP inside a process group; DataParallel for the "dp" strategy on several GPUs."""
    ddp = torch.nn.parallel.DistributedDataParallel
    if distributed() and not isinstance(model, ddp):
        return ddp(model, device_ids=[device.index] if device.type == "cuda" else None)
    if strategy == "dp" and device.type == "cuda" and torch.cuda.device_count() > 1:
        return torch.nn.DataParallel(model)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The bare module under DDP / DataParallel / torch.compile wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod  # type: ignore[assignment]  # torch.compile's wrapped module
        elif isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        else:
            return model
