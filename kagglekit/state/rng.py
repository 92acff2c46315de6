"""Capture and restore every random number generator a training run touches.

States are stored as tensors and plain Python values only, so a checkpoint holding
them still loads with ``torch.load(weights_only=True)`` (numpy's state carries an
ndarray, which the safe unpickler refuses; it travels as a tensor instead).

A checkpoint is loaded onto the CPU and may resume on another machine: every state is set
from a CPU tensor, and the CUDA generator's state is kept per card index (``{index: state}``)
and put back into the card the fit runs on, so a run saved on two GPUs resumes on one and a
rank's card gets a state even when rank 0 saved only its own.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def capture(device=None) -> dict:
    """Every generator's state; CUDA's for ``device`` (the fit's card) when it is one, else for
    every card this process initialised."""
    np_state: tuple = np.random.get_state(legacy=True)  # type: ignore[assignment]  # legacy: the tuple form
    state = {
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_initialized():  # no CUDA used, no CUDA state (and none opened here)
        device = torch.device(device) if device is not None else None
        cards = [device.index or 0] if device is not None and device.type == "cuda" \
            else range(torch.cuda.device_count())
        state["cuda"] = {i: torch.cuda.get_rng_state(i) for i in cards}
    return state


def restore(state: dict, device=None) -> None:
    """Put ``state`` back; CUDA's into ``device``'s card (else card 0) where this machine has one."""
    random.setstate(_as_tuple(state["python"]))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].cpu().numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"].cpu())
    saved = cuda_states(state)
    device = torch.device(device) if device is not None else torch.device("cuda:0")
    if saved and device.type == "cuda" and torch.cuda.is_available():
        card = device.index or 0
        torch.cuda.set_rng_state(saved.get(card, saved[min(saved)]).cpu(), card)


def cuda_states(state: dict) -> dict:
    """The saved CUDA states by card index (older checkpoints kept a list of every card's)."""
    saved = state.get("cuda")
    if saved is None:
        return {}
    if isinstance(saved, dict):
        return saved
    return dict(enumerate(saved))


def _as_tuple(value):
    # random.setstate insists on tuples; be lenient with lists from other writers.
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value
