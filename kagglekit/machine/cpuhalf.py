"""The emulated T4's fp16 carried out on a CPU: its GradScaler as on the GPU, its kernels in the
CPU's fast half precision where the CPU has one, fp32 elsewhere.

Under ``KAGGLEKIT_EMULATE=t4x2`` the kit decides fp16 with a GradScaler, as on a T4, and every
decision that follows is the GPU's: the scaler scales, unscales, checks for infs and skips a
step, its state is saved and resumed, a non-finite loss rolls back to fp32. Only the kernels
differ. A CPU's fp16 kernels are far slower than its fp32 ones (a 3-D convolution's forward and
backward 68x, a matmul 10x), which would put a notebook's single emulated step at Kaggle's
shapes past its minutes. Its bf16 kernels are as fast as fp32 where oneDNN has them (AVX-512,
AMX) and as slow as fp16 where it has not (AVX2 only: a 2-D convolution 39x, a 3-D one 33x
slower than fp32, ``benchmarks/cpu_half.py``). So the kernels are chosen per CPU:

- bf16 where ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` (torch's own test of it): a
  16-bit type through the same casts, so that half-precision bugs (a dtype mismatch, a loss
  taken on half logits) surface as on the T4. Recurrent layers run in fp32 (autocast off for
  their forward, their inputs cast up): oneDNN's half-precision LSTM is slower than its fp32 one;
- fp32 elsewhere: autocast off, the scaler still at work;
- ``KAGGLEKIT_CPU_HALF=bf16|fp32`` decides instead (the tests of the half path set bf16).

The choice depends on the CPU alone, never on a timing, so a run and its resume in the next
version compute alike on one machine. fp16's narrow range, and the overflows the scaler answers,
do not arise: docs/testing.md lists it.
"""
from __future__ import annotations

import contextlib
import functools
import os

import torch

ENV = "KAGGLEKIT_CPU_HALF"
CHOICES = ("bf16", "fp32")


class CpuHalfError(ValueError):
    """``KAGGLEKIT_CPU_HALF`` names no kernel type."""


def kernels() -> torch.dtype:
    """The type the emulated fp16 computes in on this CPU: bf16 or fp32 (see the module)."""
    forced = os.environ.get(ENV, "")
    if forced:
        if forced not in CHOICES:
            raise CpuHalfError(f"{ENV}={forced!r}: use bf16 or fp32, or unset it to let the CPU decide")
        return torch.bfloat16 if forced == "bf16" else torch.float32
    return torch.bfloat16 if _onednn_has_bf16() else torch.float32


def describe() -> str:
    """The choice and why, for the machine report."""
    half = "bf16" if kernels() == torch.bfloat16 else "fp32"
    if os.environ.get(ENV):
        return f"{half} kernels: {ENV}={half}"
    return "bf16 kernels on this CPU" if half == "bf16" else "fp32 kernels: this CPU has no fast bf16"


@functools.cache
def _onednn_has_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN: no fast bf16 either
        return False


class _HalfOnCpu:
    def __init__(self, cache: bool):
        self.cast = torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache)
        self.hooks = ()

    def __enter__(self):
        self.cast.__enter__()
        from torch.nn.modules import module
        self.hooks = (module.register_module_forward_pre_hook(_recurrent_in_fp32),
                      module.register_module_forward_hook(_recurrent_done))
        return self

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        return self.cast.__exit__(*exc)


def autocast(cache: bool = True) -> _HalfOnCpu | contextlib.nullcontext:
    """The emulated fp16's autocast on the CPU (``cache=False`` as for CUDA-graph capture): in
    bf16, or none where the kernels are fp32."""
    return _HalfOnCpu(cache) if kernels() == torch.bfloat16 else contextlib.nullcontext()


def _recurrent_in_fp32(layer, args):
    if isinstance(layer, torch.nn.RNNBase):
        torch.set_autocast_enabled("cpu", False)  # set back by the layer's forward hook
        return tuple(_fp32(a) for a in args)
    return None


def _recurrent_done(layer, args, output):
    if isinstance(layer, torch.nn.RNNBase):
        torch.set_autocast_enabled("cpu", True)


def _fp32(value):
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, tuple):  # an LSTM's (h0, c0)
        return tuple(_fp32(v) for v in value)
    return value
