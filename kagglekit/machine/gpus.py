"""GPU inventory read through NVML, never through torch.cuda.

Calling ``torch.cuda.device_count()`` or ``get_device_properties()`` initialises
CUDA in the calling process; after that a fork-based DDP launch from the same
notebook fails with "Cannot re-initialize CUDA in forked subprocess". NVML
(nvidia-ml-py) answers the same questions without creating a CUDA context.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from .cards import CAPABILITY


@dataclass(frozen=True)
class GPU:
    index: int  # index as CUDA will number it (after CUDA_VISIBLE_DEVICES)
    name: str
    memory_gb: float
    capability: tuple[int, int]
    uuid: str = ""

    def as_dict(self) -> dict:
        d = asdict(self)
        d["capability"] = f"{self.capability[0]}.{self.capability[1]}"
        return d


def _visible(all_gpus: list[GPU], spec: str | None) -> list[GPU]:
    """Apply CUDA_VISIBLE_DEVICES (indices or UUID prefixes), as CUDA would."""
    if spec is None:
        return all_gpus
    chosen = []
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            break  # CUDA stops at the first invalid entry
        if token.lstrip("-").isdigit():
            idx = int(token)
            if idx < 0 or idx >= len(all_gpus):
                break
            chosen.append(all_gpus[idx])
        else:
            match = [g for g in all_gpus if g.uuid.startswith(token)]
            if len(match) != 1:
                break
            chosen.append(match[0])
    return [GPU(i, g.name, g.memory_gb, g.capability, g.uuid) for i, g in enumerate(chosen)]


def _read_nvml() -> list[GPU] | None:
    """The GPUs NVML sees; None when NVML itself is missing or fails."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: NVMLError_LibraryNotFound and friends
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            cap = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
            gpus.append(GPU(i, name, round(mem, 1), cap, uuid))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _read_nvidia_smi() -> list[GPU]:
    """The inventory from ``nvidia-smi`` (no CUDA context either), where NVML is missing."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index,name,memory.total,compute_cap,uuid",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        try:
            major, minor = (int(x) for x in parts[3].split("."))
            gpus.append(GPU(int(parts[0]), parts[1], round(float(parts[2]) / 1024, 1),
                            (major, minor), parts[4]))
        except (IndexError, ValueError):
            continue
    return gpus


def _read_proc(root: Path = Path("/proc/driver/nvidia/gpus")) -> list[GPU]:
    """The last resort: the driver's /proc files (model names; capability from the model)."""
    gpus = []
    for i, info in enumerate(sorted(root.glob("*/information")) if root.is_dir() else []):
        fields = dict(line.split(":", 1) for line in info.read_text().splitlines() if ":" in line)
        name = fields.get("Model", "").strip()
        cap = next((c for model, c in CAPABILITY.items() if model in name.split()), None)
        if cap is not None:
            gpus.append(GPU(i, name, 0.0, cap, fields.get("GPU UUID", "").strip()))
    return gpus


def inventory() -> list[GPU]:
    """The GPUs this process may use, without initialising CUDA.

    Read through NVML; where NVML is missing or fails, through ``nvidia-smi``, then the
    driver's /proc files, so a GPU machine is never mistaken for a CPU one.
    ``KAGGLEKIT_EMULATE=t4x2`` shows Kaggle's two T4s (``emulate``: the whole machine's
    decisions on a CPU). ``KAGGLEKIT_FAKE_GPUS`` ("Tesla T4:7.5:15,Tesla T4:7.5:15") fakes the
    inventory alone, so that the policy code can be tested on CPU.
    """
    from . import emulate
    emulated = emulate.machine()
    if emulated is not None:
        card = emulated.card
        cards = [GPU(i, card.name, card.memory_gib, card.capability, f"GPU-emulated-{i}")
                 for i in range(emulated.gpus)]
        return _visible(cards, os.environ.get("CUDA_VISIBLE_DEVICES"))
    fake = os.environ.get("KAGGLEKIT_FAKE_GPUS")
    if fake is not None:
        gpus = []
        for i, item in enumerate(x for x in fake.split(",") if x):
            name, cap, mem = item.split(":")
            major, minor = (int(p) for p in cap.split("."))
            gpus.append(GPU(i, name, float(mem), (major, minor), f"GPU-fake-{i}"))
        return gpus
    found = _read_nvml()
    if found is None:  # NVML missing or failing: ask the driver another way
        found = _read_nvidia_smi() or _read_proc()
    return _visible(found, os.environ.get("CUDA_VISIBLE_DEVICES"))
