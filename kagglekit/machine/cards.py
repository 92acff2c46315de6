"""The cards the kit knows, each described once: what the T4 x2 emulation shows, what
``KAGGLEKIT_AS=t4`` imitates and what the inventory's /proc fallback reads are the same record.

Kaggle's T4: compute capability 7.5 (fp16 tensor cores, no bf16, no TF32), 15 GiB of its 16 free
for a notebook (what ``nvidia-smi`` reports there). Its fp16 peak is 65 TFLOPS, but it sustains
about 24 (NVIDIA developer forum, "About GPU peak performance", 2023: cuBLAS HGEMM 4096^3 on a
T4 measures ~24 TFLOPS, held down by the 70 W power cap;
https://forums.developer.nvidia.com/t/about-gpu-peak-performance/264462): what the benchmarks
divide a model's FLOPs by for the rate one T4 consumes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Card:
    name: str  # as NVML and torch.cuda.get_device_name say it
    capability: tuple[int, int]
    memory_gib: float  # what a process may use
    fp16_flops: float = 0.0  # sustained (not peak) fp16 FLOP/s, where measured


T4 = Card("Tesla T4", (7, 5), 15.0, fp16_flops=24e12)

# Compute capability by model, for the /proc fallback (which names the model only).
CAPABILITY = {"T4": T4.capability, "P100": (6, 0), "V100": (7, 0), "A100": (8, 0), "A10": (8, 6),
              "L4": (8, 9), "H100": (9, 0), "H200": (9, 0)}
