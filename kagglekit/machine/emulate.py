"""``KAGGLEKIT_EMULATE=t4x2``: a CPU machine that takes every decision Kaggle's "GPU T4 x2" takes.

Decisions, not kernels. Under the emulation the kit sees two Tesla T4 (compute capability 7.5,
15 GB) in its inventory and 4 vCPUs. It then acts as on Kaggle:

- ``launch`` starts one rank per GPU as a process of its own (gloo, since the tensors live on
  the CPU), each with the loader workers Kaggle's 4 vCPUs give it (``workers_per_process``);
- ``isolated()`` and search workers run in processes of their own;
- the precision is fp16 autocast with a GradScaler (the CPU has both);
- checkpoints are saved and resumed through the code a GPU run uses.

Only the kernels run on the CPU. What the emulation cannot show (docs/testing.md): NCCL, CUDA
kernels and their numerics, the T4's memory limit (no out-of-memory error), pinned memory and
non-blocking copies, the driver's state, and the T4's speed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .cards import T4, Card

ENV = "KAGGLEKIT_EMULATE"


@dataclass(frozen=True)
class Machine:
    """A Kaggle machine shape as the kit sees it."""
    name: str
    card: Card
    gpus: int
    cpus: int

    def describe(self) -> str:
        major, minor = self.card.capability
        return (f"{self.name}: {self.gpus} x {self.card.name} (cc {major}.{minor}, {self.card.memory_gib:g} GB), "
                f"{self.cpus} vCPUs, emulated on the CPU")


MACHINES = {"t4x2": Machine("t4x2", T4, gpus=2, cpus=4)}


class EmulationError(ValueError):
    """``KAGGLEKIT_EMULATE`` names no machine the kit can emulate."""


def machine() -> Machine | None:
    """The emulated machine, or None when the kit runs as what it is."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return None
    if value not in MACHINES:
        raise EmulationError(f"{ENV}={value!r} is not a machine the kit emulates: use "
                             f"{' or '.join(MACHINES)}, or leave it unset")
    return MACHINES[value]


def active() -> bool:
    return machine() is not None
