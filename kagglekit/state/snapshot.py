"""What a checkpoint holds: the full training state, taken from and put back into live objects.

Model, optimizer, scheduler and scaler state dicts plus every RNG (``rng``), all of it
tensors and plain containers, so it loads with ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

from ..parallel import ranks
from . import rng

unwrap = ranks.unwrap  # the bare module under DDP / DataParallel / compile wrappers


def snapshot(model, optimizer=None, scheduler=None, scaler=None, **extra) -> dict:
    """Everything needed to continue training exactly where it stopped."""
    state = {"model": unwrap(model).state_dict(), "rng": rng.capture(), **extra}
    for key, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
        if obj is not None:
            state[key] = obj.state_dict()
    return state


def restore(state: dict, model, optimizer=None, scheduler=None, scaler=None) -> None:
    """Load ``state`` into the live objects, in place (and the RNGs)."""
    unwrap(model).load_state_dict(state["model"])
    for key, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
        if obj is not None and key in state:
            obj.load_state_dict(state[key])
    if "rng" in state:
        rng.restore(state["rng"])
