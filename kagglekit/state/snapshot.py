"""What a checkpoint holds: the full training state, taken from and put back into live objects.

Model, optimizer, scheduler and scaler state dicts plus every RNG (``rng``), all of it
tensors and plain containers, so it loads with ``torch.load(weights_only=True)``.

``frozen=False``: the model's part holds only what trains (parameters with ``requires_grad``,
and the buffers) — LoRA adapters and a head instead of a 7B base (14 GB, against Kaggle's 20 GB
of output). The frozen parameters come from the base model each run loads, whose identity the
checkpoint's config must then name (``readers.pretrained.base_identity``).
"""
from __future__ import annotations

from ..parallel import ranks
from . import rng

unwrap = ranks.unwrap  # the bare module under DDP / DataParallel / compile wrappers
TRAINABLE = "trainable"  # state["model_part"] of a checkpoint without the frozen parameters


def model_state(model, frozen: bool = True) -> dict:
    """The model's state dict; without the frozen parameters when ``frozen`` is False."""
    bare = unwrap(model)
    state = bare.state_dict()
    if frozen:
        return state
    skipped = {name for name, p in bare.named_parameters() if not p.requires_grad}
    return {k: v for k, v in state.items() if k not in skipped}


def load_model_state(model, state: dict, part: str = "all") -> None:
    """Load ``state`` into ``model``; a ``TRAINABLE`` part must cover every parameter that
    trains and name no parameter the model lacks (the frozen ones stay as loaded)."""
    bare = unwrap(model)
    if part != TRAINABLE:
        bare.load_state_dict(state)
        return
    own = bare.state_dict()
    shapes = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    unexpected = [k for k in state if k not in own]
    trains = {name for name, p in bare.named_parameters() if p.requires_grad}
    lost = sorted(trains - set(state))
    if unexpected or lost or shapes:
        raise RuntimeError(
            f"the checkpoint's trainable part does not fit this model: {len(shapes)} of another "
            f"shape ({', '.join(shapes[:2])}), {len(unexpected)} unknown ({', '.join(unexpected[:2])}), "
            f"{len(lost)} training parameters missing ({', '.join(lost[:2])}). Build the model as "
            "the run that saved it did (the same base, adapter rank and head).")
    bare.load_state_dict(state, strict=False)


def snapshot(model, optimizer=None, scheduler=None, scaler=None, *, frozen: bool = True,
             device=None, **extra) -> dict:
    """Everything needed to continue training exactly where it stopped (``device``: the fit's,
    whose CUDA generator is kept)."""
    state = {"model": model_state(model, frozen), "rng": rng.capture(device), **extra}
    if not frozen:
        state["model_part"] = TRAINABLE
    for key, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
        if obj is not None:
            state[key] = obj.state_dict()
    return state


def restore(state: dict, model, optimizer=None, scheduler=None, scaler=None, *,
            device=None) -> None:
    """Load ``state`` (loaded onto the CPU) into the live objects, in place, each tensor moved
    where its object lives (and the RNGs, CUDA's into ``device``'s card).

    A scaler's empty state (saved by a bf16 or fp32 run, whose scaler was off) leaves a fresh
    fp16 scaler as it is: the run moved to a card that needs one (a T4) starts scaling anew."""
    load_model_state(model, state["model"], state.get("model_part", "all"))
    for key, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
        if obj is not None and key in state and (state[key] or key != "scaler"):
            obj.load_state_dict(state[key])
    if "rng" in state:
        rng.restore(state["rng"], device)
