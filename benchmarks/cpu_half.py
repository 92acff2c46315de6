"""The emulated T4's fp16 on this CPU: what each kernel type costs against fp32, and the kit's choice.

Under ``KAGGLEKIT_EMULATE=t4x2`` the T4's fp16 runs on the CPU (``kagglekit.machine.cpuhalf``):
in bf16 where oneDNN has bf16 kernels, in fp32 elsewhere. This measures why, at the notebooks'
layer shapes, on one thread: one forward and backward of each layer in fp32, in the emulation's bf16 autocast
and in fp16 autocast (what the T4 itself would run), alternating rounds, medians, ratios to fp32.

- the 3-D U-Net's convolution (segmentation_3d: 16 channels; a 32^3 patch instead of 96^3, so
  that the slow kernels finish in seconds);
- a 2-D CNN's convolution (image_classification, audio_classification: 32 channels, 64^2);
- a Transformer's linear layer (text, sequence models: 1024 wide, 512 tokens);
- an LSTM (sequence_models, timeseries_forecast), which the emulation runs in fp32 anyway
  (oneDNN without bf16 kernels refuses a half LSTM outright: "fails").
"""
from __future__ import annotations

import statistics
import time

import torch

from kagglekit.machine import cpuhalf

LAYERS = {
    "conv3d 16ch 2x32^3": (lambda: torch.nn.Conv3d(16, 16, 3, padding=1), (2, 16, 32, 32, 32)),
    "conv2d 32ch 8x64^2": (lambda: torch.nn.Conv2d(32, 32, 3, padding=1), (8, 32, 64, 64)),
    "linear 1024 x512": (lambda: torch.nn.Linear(1024, 1024), (512, 1024)),
    "lstm 64->128 8x48": (lambda: torch.nn.LSTM(64, 128, batch_first=True), (8, 48, 64)),
}
TYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def step_seconds(layer: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype | None) -> float:
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out = layer(x)
    out = out[0] if isinstance(out, tuple) else out
    out.float().sum().backward()
    return time.perf_counter() - started


def measure(make, shape, rounds: int) -> dict[str, float | None]:
    """Median seconds per type (None: the CPU has no such kernel), the types alternating within
    each round, after a warm-up round (oneDNN's primitive cache)."""
    torch.manual_seed(0)
    layer, x = make(), torch.randn(shape)
    times: dict[str, list[float] | None] = {name: [] for name in TYPES}
    for round_ in range(rounds + 1):
        for name, dtype in TYPES.items():
            kept = times[name]
            if kept is None:
                continue
            try:
                seconds = step_seconds(layer, x, dtype)
            except RuntimeError:  # "could not create a primitive descriptor"
                times[name] = None
                continue
            if round_:
                kept.append(seconds)
    return {name: None if kept is None else statistics.median(kept) for name, kept in times.items()}


def ratio(seconds: float | None, fp32: float) -> str:
    return "fails" if seconds is None else f"{seconds / fp32:.2f}x"


def main(rounds: int = 3) -> None:
    torch.set_num_threads(1)  # as each emulated rank runs in the suite (OMP_NUM_THREADS=1)
    choice = cpuhalf.kernels()
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads; oneDNN bf16 kernels: {cpuhalf._onednn_has_bf16()}")
    print(f"the emulated fp16 computes in: {str(choice).removeprefix('torch.')}\n")
    print(f"{'layer (forward + backward)':28s} {'fp32 ms':>9s} {'bf16/fp32':>10s} {'fp16/fp32':>10s}")
    for name, (make, shape) in LAYERS.items():
        seconds = measure(make, shape, rounds)
        fp32 = seconds["fp32"]
        assert fp32 is not None, name
        print(f"{name:28s} {fp32 * 1e3:9.1f} {ratio(seconds['bf16'], fp32):>10s} {ratio(seconds['fp16'], fp32):>10s}",
              flush=True)


if __name__ == "__main__":
    main()
