"""The emulated T4's fp16 carried out on a CPU: its GradScaler as on the GPU, its kernels in the
CPU's fast half precision.

Under ``KAGGLEKIT_EMULATE=t4x2`` the kit decides fp16 with a GradScaler, as on a T4, and every
decision that follows is the GPU's: the scaler scales, unscales, checks for infs and skips a
step, its state is saved and resumed, a non-finite loss rolls back to fp32. Only the kernels
differ. The CPU's fp16 kernels are far slower than its fp32 ones (measured here: a 3-D
convolution's forward and backward 68x, a matmul 10x), which would put a notebook's single
emulated step at Kaggle's shapes past its minutes; its bf16 kernels are as fast as fp32 or
faster. So autocast runs in bf16: a 16-bit type through the same casts, so that half-precision
bugs (a dtype mismatch, a loss taken on half logits) surface as on the T4. Recurrent layers run
in fp32 (autocast off for their forward, their inputs cast up): oneDNN's half-precision LSTM is
slower than its fp32 one, and it has no fp16 LSTM at all on most CPUs. fp16's narrow range, and
the overflows the scaler answers, do not arise: docs/testing.md lists it.
"""
from __future__ import annotations

import torch

KERNELS = torch.bfloat16


class _HalfOnCpu:
    def __init__(self, cache: bool):
        self.cast = torch.autocast("cpu", dtype=KERNELS, cache_enabled=cache)
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


def autocast(cache: bool = True) -> _HalfOnCpu:
    """The emulated fp16's autocast on the CPU (``cache=False`` as for CUDA-graph capture)."""
    return _HalfOnCpu(cache)


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
