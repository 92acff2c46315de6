"""The per-GPU batch and the accumulation a training uses, chosen by measuring the card (seed 002:
16 patches per GPU where they fit, accumulation to the same effective batch where they do not).

``per_gpu_batch(make_model, example, loss, device=, most=)`` finds the largest per-GPU batch one
training step (forward, backward, AdamW's step, in the run's precision) fits in, at most ``most``,
less ``batchsize.HEADROOM``; ``split(effective, batch, world)`` then says how many micro-steps
reach the effective batch over every GPU. Where the answer comes from:

- **a CUDA card**: by running the step (``batchsize.largest_batch``), within a T4's 15 GiB under
  ``KAGGLEKIT_AS=t4``;
- **the T4 x2 emulation**: by counting. The step runs on fake tensors (``FakeTensorMode``: shapes
  and dtypes, no arithmetic, a few milliseconds), the bytes of every storage are added while it
  lives, and a batch runs out of memory when their peak passes the emulated card's memory. What
  the count does not see (cuDNN's workspaces, the allocator's rounding and fragmentation, the
  GradScaler's few bytes) is what the headroom keeps;
- **a CPU without emulation**: no card to fill: ``most``.

A notebook keeps the answer as a unit of its run, so the next kernel version resumes its
checkpoints with the batch they were trained with.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..machine import ascard, emulate
from ..machine.precision import Amp, resolve
from .batchsize import largest_batch


class CountedOutOfMemory(torch.cuda.OutOfMemoryError):
    """A counted step that needs more than the emulated card holds (largest_batch's signal)."""


class LiveBytes(TorchDispatchMode):
    """The bytes of tensor storage alive while the mode is on, and their peak: every storage an
    operation returns is counted once, until Python frees it."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._counted: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._count(value.untyped_storage())
        return out

    def _count(self, storage) -> None:
        import weakref
        if id(storage) in self._counted:
            return
        self._counted.add(id(storage))
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._freed, id(storage), storage.nbytes())

    def _freed(self, key: int, size: int) -> None:
        self._counted.discard(key)
        self.live -= size


def counted_step_bytes(make_model: Callable, example: Callable, loss: Callable, batch: int, half: bool) -> int:
    """The peak bytes of one training step at ``batch`` on fake tensors: the model, its gradients,
    AdamW's moments and the step's temporaries, the activations autograd keeps, the batch itself.
    ``half``: autocast to a 16-bit type (bf16 on the CPU stands for the card's fp16: the same 2 bytes,
    whatever this CPU's half kernels are)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(), LiveBytes() as live:
        model = make_model()
        optimizer = torch.optim.AdamW(model.parameters())
        inputs = example(batch)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
            value = loss(model, inputs)
        value.backward()  # no GradScaler: it reads its found-inf flag, which a fake tensor has no value of
        optimizer.step()
    return live.peak


def per_gpu_batch(make_model: Callable, example: Callable, loss: Callable, *, device, most: int,
                  precision: str = "auto") -> dict:
    """``{"batch", "how", "largest_fit", "peak_mb", "tries"}``: the per-GPU batch to train with (see
    the module). ``example(batch)``: a batch as the loader gives it; ``loss(model, batch)``: the
    training step's loss."""
    device = torch.device(device)
    amp = Amp(resolve(precision, device))
    if device.type == "cuda":
        ascard.confine(device)
        model = make_model().to(device)
        optimizer = torch.optim.AdamW(model.parameters())

        def step(batch: int) -> None:
            inputs = [t.to(device) for t in example(batch)]
            with amp.autocast():
                value = loss(model, inputs)
            amp.scaler.scale(value).backward()
            amp.scaler.step(optimizer)
            amp.scaler.update()
            optimizer.zero_grad(set_to_none=True)
        found = largest_batch(step, start=1, limit=most, device=device)
        return {**found, "how": f"measured on {torch.cuda.get_device_name(device)} ({amp.name})"}
    machine = emulate.machine()
    if machine is None:
        return {"batch": most, "how": "no card to fill (CPU): the most asked for", "largest_fit": None,
                "peak_mb": None, "tries": []}
    cap = machine.card.memory_gib * 2**30
    tries: dict[int, int] = {}

    def counted(batch: int) -> None:
        tries[batch] = counted_step_bytes(make_model, example, loss, batch, amp.precision.dtype is not None)
        if tries[batch] > cap:
            raise CountedOutOfMemory(f"{tries[batch] / 2**30:.1f} GiB counted at batch {batch}")
    found = largest_batch(counted, start=1, limit=most)
    fit = found["largest_fit"]
    return {**found, "peak_mb": round(tries[fit] / 2**20, 1),
            "how": f"counted on fake tensors against the emulated {machine.card.name}'s "
                   f"{machine.card.memory_gib:g} GiB ({amp.name})"}


def split(effective: int, batch: int, world: int) -> tuple[int, int]:
    """(per-GPU batch, micro-steps per optimizer step) for ``effective`` samples per optimizer step
    over ``world`` GPUs, the per-GPU batch at most ``batch``: the fewest micro-steps, then the
    smallest batch that gives them (32 over 2 GPUs that hold 16: (16, 1); that hold 12: (8, 2))."""
    if min(effective, batch, world) < 1:
        raise ValueError(f"effective={effective}, batch={batch} and world={world} must be at least 1")
    steps = math.ceil(effective / (batch * world))
    return math.ceil(effective / (steps * world)), steps
