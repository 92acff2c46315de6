"""``KAGGLEKIT_AS=t4``: a bigger CUDA card behaves as one of Kaggle's T4s.

A competitor with a local A100, L4 or H100 learns before pushing whether a notebook fits and runs
on Kaggle's card: the kit decides the precision for compute capability 7.5 (fp16 with a
GradScaler, never bf16), and in every process that uses the card it caps the memory at the T4's
15 GiB (``torch.cuda.set_per_process_memory_fraction``: the caching allocator raises CUDA's
out-of-memory error past it, which the back-off answers as on a T4), turns TF32 off (a T4 has
none) and flash attention off (it needs compute capability 8.0; the T4 runs the memory-efficient
or the plain kernel). metrics.json records it (``env.as_card``).

What it cannot imitate (docs/kaggle.md): the T4's speed, its fp16 numerics in kernels the bigger
card runs differently, PCIe between two cards, and the host's 4 vCPUs and 29 GB.
"""
from __future__ import annotations

import os

from .cards import T4, Card

ENV = "KAGGLEKIT_AS"


CARDS = {"t4": T4}


class AsCardError(RuntimeError):
    """``KAGGLEKIT_AS`` asks for something this machine cannot do."""


def card() -> Card | None:
    """The card imitated (None: the machine's own). Refused, in one line, on a machine
    without a CUDA card, and for a card the kit does not know."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return None
    if value not in CARDS:
        raise AsCardError(f"{ENV}={value!r}: the kit imitates {', '.join(CARDS)} (or leave it unset)")
    from . import emulate, gpus
    if not gpus.inventory() or emulate.active():
        raise AsCardError(f"{ENV}={value} needs a CUDA card to behave as a {CARDS[value].name} on, "
                          "and this machine has none (KAGGLEKIT_EMULATE=t4x2 takes Kaggle's T4 x2 "
                          "decisions on a CPU instead)")
    return CARDS[value]


def describe(imitated: Card | None) -> str:
    if imitated is None:
        return "no"
    major, minor = imitated.capability
    return (f"{imitated.name}: cc {major}.{minor}, {imitated.memory_gib:g} GiB cap, fp16 + GradScaler, "
            "no TF32, no flash attention")


_confined: set = set()  # the cards this process has capped (once each)


def confine(device) -> None:
    """In this process, make ``device`` (a CUDA card) behave as the imitated card: memory cap,
    no TF32, no flash attention. Nothing without ``KAGGLEKIT_AS``; once per card."""
    imitated = card()
    if imitated is None:
        return
    import torch
    device = torch.device(device)
    if device.type != "cuda":
        return
    if device.index is None:  # "cuda": the current card (the allocator's cap needs its index)
        device = torch.device("cuda", torch.cuda.current_device())
    if device in _confined:
        return
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, imitated.memory_gib * 2**30 / total), device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.enable_flash_sdp(False)
    _confined.add(device)
