"""Which precision to train in, decided from the card's compute capability.

- compute capability >= 8.0 (A100, L4, H100...): bf16 autocast, no scaler needed.
- 7.x (T4, V100): fp16 autocast with a GradScaler. ``torch.cuda.is_bf16_supported()``
  answers True on a T4 through emulation, which runs far slower than fp16, so
  bf16 is refused there rather than trusted.
- below 7.0 (P100): refused; current Kaggle images carry no kernels for it.
- CPU: fp32 (bf16 autocast on CPU may be asked for explicitly).
- ``KAGGLEKIT_EMULATE=t4x2``: the T4's decision (fp16 + GradScaler), carried out on the CPU
  (``cpuhalf``: the scaler as on the GPU, the kernels in the CPU's fast half precision, or fp32
  where it has none).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

CHOICES = ("auto", "fp32", "fp16", "bf16")
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}  # fp32: no autocast
_NO_AUTOCAST = contextlib.nullcontext()  # stateless, so one serves every step


class PrecisionError(ValueError):
    """The requested precision cannot run on this device."""


@dataclass(frozen=True)
class Precision:
    name: str  # "fp32", "fp16" or "bf16"
    device_type: str  # "cuda" or "cpu"
    auto: bool = False  # chosen by "auto": fit may give fp16 up for fp32 after a NaN loss

    @property
    def dtype(self) -> torch.dtype | None:
        return _DTYPES.get(self.name)

    @property
    def compute_dtype(self) -> torch.dtype | None:
        """The type ``autocast`` computes in (None: fp32): the emulated T4's fp16 runs the CPU's
        bf16 kernels, or its fp32 ones where bf16 is slow (``cpuhalf``)."""
        if (self.device_type, self.name) == ("cpu", "fp16"):
            from .cpuhalf import kernels
            half = kernels()
            return half if half != torch.float32 else None
        return self.dtype

    @property
    def needs_scaler(self) -> bool:
        # fp16 has too little range for small gradients; bf16 has fp32's range.
        return self.name == "fp16"

    def autocast(self, cache: bool = True):
        """Autocast to this precision; ``cache=False`` for CUDA-graph capture, which
        cannot hold autocast's cache of cast weights."""
        if self.dtype is None:
            return _NO_AUTOCAST
        if (self.device_type, self.name) == ("cpu", "fp16"):  # an emulated T4
            from .cpuhalf import autocast
            return autocast(cache)
        return torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=cache)


class Amp:
    """A precision at work in one training run, with the GradScaler it needs (a no-op unless
    fp16). The two change together: a fit that gives fp16 up for fp32 swaps the whole."""

    def __init__(self, precision: Precision):
        self.precision = precision
        self.scaler = torch.amp.GradScaler(precision.device_type, enabled=precision.needs_scaler)

    @property
    def name(self) -> str:
        return self.precision.name

    @property
    def auto(self) -> bool:
        return self.precision.auto

    def autocast(self, cache: bool = True):
        return self.precision.autocast(cache)


def choose(requested: str = "auto", capability: tuple[int, int] | None = None,
           gpu_name: str = "", device_type: str = "cuda") -> Precision:
    """Resolve ``requested`` for a card of ``capability`` (None means CPU); ``device_type``
    "cpu" carries a card's decision out on the CPU (the emulated T4).

    Raises PrecisionError with the reason and the fix when the card cannot do it.
    """
    if requested not in CHOICES:
        raise PrecisionError(f"precision={requested!r} is not one of {CHOICES}")
    if capability is None:
        if requested == "fp16":
            raise PrecisionError(
                "precision='fp16' needs a CUDA GPU; on CPU use 'fp32' (or 'bf16' on a CPU "
                "with bf16 support), or 'auto'.")
        return Precision("bf16" if requested == "bf16" else "fp32", "cpu")

    card = f"{gpu_name or 'this GPU'} (compute capability {capability[0]}.{capability[1]})"
    if capability < (7, 0):
        raise PrecisionError(
            f"{card} is too old: current PyTorch builds on Kaggle carry no kernels below 7.0. "
            "Choose the 'GPU T4 x2' accelerator (machine_shape NvidiaTeslaT4).")
    if requested == "bf16" and capability < (8, 0):
        raise PrecisionError(
            f"precision='bf16' was asked for, but {card} has no bf16 tensor cores: "
            "torch.cuda.is_bf16_supported() says True only through slow emulation. "
            "Use precision='fp16' (or 'auto', which picks fp16 + GradScaler here).")
    if requested == "auto":
        return Precision("bf16" if capability >= (8, 0) else "fp16", device_type, auto=True)
    return Precision(requested, device_type)


def resolve(requested, device: torch.device) -> Precision:
    """``requested`` (a name or a Precision) for ``device``: the one place a fit decides.

    (``env.describe_machine`` decides the same from NVML, without touching CUDA, to print it.)
    """
    if isinstance(requested, Precision):
        return requested
    device = torch.device(device)
    if device.type != "cuda":
        from . import emulate
        card = emulate.machine()
        if card is not None and device.type == "cpu":  # the emulated T4's decision, on the CPU
            return choose(requested, card.card.capability, card.card.name, device_type="cpu")
        return choose(requested, None)
    from . import ascard
    imitated = ascard.card()  # KAGGLEKIT_AS=t4: decided as for the T4
    if imitated is not None:
        return choose(requested, imitated.capability, imitated.name)
    return choose(requested, torch.cuda.get_device_capability(device),
                  torch.cuda.get_device_name(device))
