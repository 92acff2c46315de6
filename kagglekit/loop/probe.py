"""``precision="auto"`` chosen by measurement: the fit's own step timed in fp32 and in the card's
mixed precision, on the same batches, before training; the faster is trained in.

A card's name does not say which is faster for a model: on a lent H100 run as a T4, fp16 against
fp32 samples/s was x3.8 for the U-Net and x1.81 for the Transformer, but x0.86 for the LSTM and
x0.64 for a GCN on 50k nodes (benchmarks/RESULTS.md). So, for ``precision="auto"`` on a card
whose mixed precision it is (fp16 + GradScaler on a T4, bf16 from compute capability 8.0):

- ``WARMUP`` steps, then ``TIMED`` steps, in each precision, on the same first batches of the
  fit's loader, through the fit's own loss, optimizer and clipping;
- mixed precision is kept when its samples/s beat fp32's by ``MARGIN``, or when fp32 runs out of
  memory where it does not; else the fit trains in fp32. The rates, the choice and why go into
  the fit's summary (``precision_probe``: metrics.json) and its state;
- the probe leaves no trace: the model's and optimizer's state, the random generators and the
  loader's position are put back, so training after it is bitwise what training in the chosen
  precision named explicitly gives;
- the choice is part of the fit's state (its checkpoints): a resume, or the next kernel version,
  trains on in it without measuring again. Under DDP rank 0's measurement decides every rank's;
- a fit shorter than ``MIN_STEPS`` is not measured (the probe would cost more than it saves), nor
  is an explicit precision (obeyed) or the CPU (fp32);
- under ``KAGGLEKIT_EMULATE=t4x2`` the probe runs (a step of each, timed) and records the CPU's
  rates, which say nothing of a T4: the card's precision is kept, and the record says why.
"""
from __future__ import annotations

import copy
import time

import torch

from ..machine import emulate, precision as precision_mod
from ..parallel import loaders, ranks
from ..parallel.batches import batch_size
from ..state import rng
from . import step as step_mod

WARMUP, TIMED = 2, 5  # steps per precision: the first ones pay for autotuning and allocation
MARGIN = 0.10  # mixed precision must be this much faster to be kept
MIN_STEPS = 100  # a shorter fit keeps the card's precision unmeasured


def settle(parts, loss_fn, loader, clip_grad_norm, planned_steps: int) -> dict | None:
    """Decide a fit's precision before it trains (see the module's docstring); the record, or
    None when there is nothing to decide."""
    amp = parts.amp
    if not amp.auto or amp.name == "fp32":
        return None
    record = parts.state.precision_choice
    if not record:  # a resumed state keeps the choice its session measured
        if parts.state.step > 0 or planned_steps < MIN_STEPS:
            record = {"chosen": amp.name, "why": f"not measured: {_unmeasured(parts, planned_steps)}"}
        else:
            record = ranks.from_main(_measure(parts, loss_fn, loader, clip_grad_norm), parts.device)
        parts.state.precision_choice = record
    if record["chosen"] == "fp32":
        parts.amp = precision_mod.Amp(precision_mod.Precision("fp32", parts.device.type, auto=True))
    return record


def _unmeasured(parts, planned_steps: int) -> str:
    if parts.state.step > 0:
        return f"resumed at step {parts.state.step} from a state that recorded no choice"
    return f"{planned_steps} steps, fewer than the {MIN_STEPS} worth measuring"


def measure(run_steps, samples: int, name: str, device: torch.device) -> float:
    """Samples/s of ``run_steps()`` (``TIMED`` steps of ``samples`` in all) in precision
    ``name``: the clock the probe decides by (tests put a stand-in here)."""
    _sync(device)
    started = time.perf_counter()
    run_steps()
    _sync(device)
    return samples / max(time.perf_counter() - started, 1e-9)


def _measure(parts, loss_fn, loader, clip_grad_norm) -> dict:
    mixed, device = parts.amp.name, parts.device
    warmup, timed = (1, 1) if _emulated() else (WARMUP, TIMED)  # the CPU's rates decide nothing there
    batches = _first_batches(loader, warmup + timed, device)
    samples = sum(batch_size(b) for b in batches[warmup:])
    kept, training = _snapshot(parts), parts.model.training
    parts.model.train()  # as the fit's steps run (dropout on; its draws are put back with the rest)
    rates: dict[str, float | None] = {}
    try:
        for name in (mixed, "fp32"):
            amp = precision_mod.Amp(precision_mod.Precision(name, device.type))
            try:
                _steps(parts, loss_fn, batches[:warmup], amp, clip_grad_norm)
                rates[name] = round(measure(lambda a=amp: _steps(parts, loss_fn, batches[warmup:], a, clip_grad_norm),
                                            samples, name, device), 1)
            except step_mod.OOM_ERRORS:
                rates[name] = None
                _free(device)
            _restore(parts, kept)
    finally:
        _restore(parts, kept)
        parts.model.train(training)
    return _decide(mixed, rates)


def _decide(mixed: str, rates: dict) -> dict:
    fast, slow = rates.get(mixed), rates.get("fp32")
    record = {"rates": rates, "margin": MARGIN}
    if _emulated():
        return {**record, "chosen": mixed, "why": "emulated T4: the CPU's rates say nothing of a T4's, the "
                "card's precision kept"}
    if slow is None and fast is not None:
        return {**record, "chosen": mixed, "why": "fp32 ran out of memory"}
    if fast is not None and slow is not None and fast >= (1 + MARGIN) * slow:
        return {**record, "chosen": mixed, "why": f"{mixed} x{fast / slow:.2f} the samples/s of fp32"}
    ratio = f"x{fast / slow:.2f}" if fast and slow else "out of memory"
    return {**record, "chosen": "fp32", "why": f"{mixed} {ratio} the samples/s of fp32: not {MARGIN:.0%} faster"}


def _emulated() -> bool:
    return emulate.active()


def _steps(parts, loss_fn, batches: list, amp, clip_grad_norm) -> None:
    for batch in batches:
        step_mod.backward(parts.model, [batch], loss_fn, amp, amp.scaler)
        step_mod.apply(parts.model, parts.optimizer, amp.scaler, clip_grad_norm)


def _first_batches(loader, n: int, device: torch.device) -> list:
    """The loader's first ``n`` batches of the epoch the fit starts (a short loader's again from
    its first), on the device; the loader is positioned again by the fit before it trains."""
    loaders.start_epoch(loader, 0, 0)
    batches = []
    for batch in loader:
        batches.append(loaders.to_device(batch, device))
        if len(batches) == n:
            break
    return [batches[i % len(batches)] for i in range(n)]


def _snapshot(parts) -> dict:
    """What the probe's steps change: the weights that train and the buffers (a frozen base, a
    language model's billions of weights, is not copied), the optimizer's state, the generators."""
    model = ranks.unwrap(parts.model)
    return {"tensors": [t.detach().clone() for t in _changing(model)],
            "optimizer": copy.deepcopy(parts.optimizer.state_dict()), "rng": rng.capture(parts.device)}


def _changing(model) -> list:
    return [p for p in model.parameters() if p.requires_grad] + list(model.buffers())


def _restore(parts, kept: dict) -> None:
    with torch.no_grad():
        for live, saved in zip(_changing(ranks.unwrap(parts.model)), kept["tensors"]):
            live.copy_(saved)
    parts.optimizer.load_state_dict(copy.deepcopy(kept["optimizer"]))
    parts.optimizer.zero_grad(set_to_none=True)
    rng.restore(kept["rng"], parts.device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
