"""Capture and restore every random number generator a training run touches.

States are stored as tensors and plain Python values only, so a checkpoint holding
them still loads with ``torch.load(weights_only=True)`` (numpy's state carries an
ndarray, which the safe unpickler refuses; it travels as a tensor instead).
"""
from __future__ import annotations

import random

import numpy as np
import torch


def capture() -> dict:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_initialized():  # no CUDA used, no CUDA state (and none opened here)
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict) -> None:
    random.setstate(_as_tuple(state["python"]))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(value):
    # random.setstate insists on tuples; be lenient with lists from other writers.
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value
