"""The figures only a GPU shows, each a ratio against a baseline taken in the same run.

1. AMP vs fp32: fit steps/s of a 3-D conv stack (the layers of the segmentation U-Net)
   in fp32, fp16 + GradScaler and, where the card has it, bf16.
2. CUDA graphs: the utilisation notebook's cycle loop (sync vs graph replay, the
   write-up hoped for about 2x) and fit(cuda_graphs="auto") vs eager on its MLP.
3. The NVML sampler's cost: its own time per wall second, and fit steps/s with
   the GPU sampler (kk.Monitor(gpu=...)) on vs off.
4. Utilisation as the kit reports it against nvidia-smi, sampled side by side over
   a load that keeps the GPU busy about half the time.

Without CUDA it says so and exits 0 (``make bench`` runs everywhere).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import kagglekit as kk
from kagglekit import datasets, loaders as data, models, monitor


def _fit_rate(model_fn, loader, loss, steps: int, **kw) -> float:
    """Samples/s of ``steps`` fit steps after a short warm-up fit (cuDNN autotuning)."""
    kk.seed_everything(0)
    model = model_fn()
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    common = dict(run=kk.Alone(device="cuda"), progress=False, checkpoints=None, epochs=10**6, **kw)
    kk.fit(model, opt, loader, loss, max_steps=5, **common)
    torch.cuda.synchronize()
    return kk.fit(model, opt, loader, loss, max_steps=steps, **common).samples_per_s


def _interleaved(variants: dict, repeats: int) -> dict:
    """Median of each variant over ``repeats`` rounds, run in alternating order."""
    rates = {name: [] for name in variants}
    names = list(variants)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            rates[name].append(variants[name]())
    return {name: statistics.median(v) for name, v in rates.items()}


def _conv3d_stack(width: int = 16) -> torch.nn.Module:
    """Four 3x3x3 convolutions with GroupNorm and GELU, then a 1x1x1 head."""
    layers, cin = [], 1
    for cout in (width, 2 * width, 2 * width, width):
        layers += [torch.nn.Conv3d(cin, cout, 3, padding=1, bias=False), torch.nn.GroupNorm(8, cout),
                   torch.nn.GELU()]
        cin = cout
    return torch.nn.Sequential(*layers, torch.nn.Conv3d(cin, 1, 1))


def amp_vs_fp32(steps: int, repeats: int) -> None:
    vols, masks = torch.randn(64, 1, 32, 32, 32), (torch.rand(64, 1, 32, 32, 32) > 0.7).float()
    loader = data.make_loader(torch.utils.data.TensorDataset(vols, masks), 8, num_workers=0)
    loss = kk.supervised(torch.nn.functional.binary_cross_entropy_with_logits)
    precisions = ["fp32", "fp16"] + (["bf16"] if torch.cuda.get_device_capability() >= (8, 0) else [])
    rates = _interleaved({p: (lambda p=p: _fit_rate(_conv3d_stack, loader, loss,
                                                     steps, precision=p)) for p in precisions},
                         repeats)
    for p in precisions:
        print(f"  conv3d {p:4s}: {rates[p]:8.1f} samples/s   ratio vs fp32 {rates[p] / rates['fp32']:.2f}")


def _cycle_steps(size: int, device):
    """A launch-bound cycle: a few ms of numpy, then six small matmuls on the GPU."""
    layers = [torch.randn(size, size, device=device) / size ** 0.5 for _ in range(6)]

    def cpu_step(cycle: int) -> np.ndarray:
        x = np.random.default_rng(cycle).standard_normal((32, size)).astype(np.float32)
        for _ in range(20):
            x = np.tanh(x * 1.01 + 0.01 * np.roll(x, 1, axis=1))
        return x

    def gpu_step(x):
        for w in layers:
            x = torch.relu(x @ w)
        return x
    return cpu_step, gpu_step


def _fit_steps_per_s(steps: int, size: int, mode: str) -> dict:
    torch.manual_seed(0)
    model = models.MLP(size, size, 4, depth=8)
    loader = data.make_loader(datasets.tabular(64 * steps, features=size), 64, num_workers=0)
    result = kk.fit(model, torch.optim.AdamW(model.parameters(), 1e-3), loader,
                    kk.supervised(torch.nn.functional.cross_entropy), run=kk.Alone(device="cuda"), max_steps=steps,
                    progress=False, speed=kk.Speed(precision="fp32", cuda_graphs=mode))
    return {"steps_per_s": result.samples_per_s / 64, "status": result.cuda_graphs,
            "verdict": result.diagnosis()["verdict"]}


def cuda_graphs(cycles: int, steps: int) -> None:
    device = torch.device("cuda")
    with tempfile.TemporaryDirectory() as tmp:
        rows = {r["strategy"]: r for r in kk.cycles.study(*_cycle_steps(256, device), cycles, device,
                                                          batch_cycles=8, save_every=0, folder=Path(tmp))}
    sync = rows["sync"]["cycles_per_s"]
    for name, r in rows.items():
        print(f"  cycle loop {name:12s}: {r['cycles_per_s']:8.1f} cycles/s  util "
              f"{r['gpu_util_pct']}%   ratio vs sync {r['cycles_per_s'] / sync:.2f}")
    eager, graphed = _fit_steps_per_s(steps, 256, "off"), _fit_steps_per_s(steps, 256, "auto")
    print(f"  fit eager      : {eager['steps_per_s']:8.1f} steps/s ({eager['verdict']})")
    print(f"  fit cuda graphs: {graphed['steps_per_s']:8.1f} steps/s   ratio "
          f"{graphed['steps_per_s'] / eager['steps_per_s']:.2f}   [{graphed['status']}]")


def sampler_cost(steps: int, repeats: int) -> None:
    loader = data.make_loader(datasets.tabular(64 * steps, features=256), 64, num_workers=0)
    loss = kk.supervised(torch.nn.functional.cross_entropy)
    rates = _interleaved({on: (lambda on=on: _fit_rate(lambda: models.MLP(256, 256, 4, depth=8),
                                                       loader, loss, steps, monitor=kk.Monitor(gpu=on)))
                          for on in (False, True)}, repeats)
    with monitor.GPUSampler() as sampler:
        time.sleep(5)
    print(f"  NVML sampler own time: {sampler.summary()['sampler_overhead_pct']:.3f}% of one core")
    print(f"  fit with sampler / without: {rates[True] / rates[False]:.3f}")


def utilisation_vs_nvidia_smi(seconds: float = 8.0) -> None:
    if shutil.which("nvidia-smi") is None:
        print("  nvidia-smi not found: skipped")
        return
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                            "-i", "0", "-lms", "500"], stdout=subprocess.PIPE, text=True)
    a = torch.randn(4096, 4096, device="cuda")
    with monitor.GPUSampler() as sampler:
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # ~50% duty cycle: busy 50 ms, idle 50 ms
            busy = time.monotonic() + 0.05
            while time.monotonic() < busy:
                a @ a
            torch.cuda.synchronize()
            time.sleep(0.05)
    smi.terminate()
    readings = [float(line) for line in smi.communicate()[0].split() if line.strip()]
    kit = [s["util"] for s in sampler.samples if s["gpu"] == 0]
    print(f"  kit (NVML) mean utilisation: {statistics.mean(kit):.1f}% over {len(kit)} samples")
    print(f"  nvidia-smi mean utilisation: {statistics.mean(readings):.1f}% over {len(readings)} samples")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--cycles", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_figures: no CUDA GPU on this machine; skipped (run it where one is)")
        return
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("1. AMP vs fp32 (fit, a 3-D conv stack, batch 8 of 32^3 patches)")
    amp_vs_fp32(args.steps // 4, args.repeats)
    print("2. CUDA-graph replay vs eager")
    cuda_graphs(args.cycles, args.steps)
    print("3. NVML sampler cost")
    sampler_cost(args.steps, args.repeats)
    print("4. utilisation: kit vs nvidia-smi")
    utilisation_vs_nvidia_smi()


if __name__ == "__main__":
    main()
