"""GPU inventory read through NVML, never through torch.cuda.

Calling ``torch.cuda.device_count()`` or ``get_device_properties()`` initialises
CUDA in the calling process; after that a fork-based DDP launch from the same
notebook fails with "Cannot re-initialize CUDA in forked subprocess". NVML
(nvidia-ml-py) answers the same questions without creating a CUDA context.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, asdict


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


def _read_nvml() -> list[GPU]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: NVMLError_LibraryNotFound and friends
        return []
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


def inventory() -> list[GPU]:
    """The GPUs this process may use, without initialising CUDA.

    ``KAGGLEKIT_FAKE_GPUS`` ("Tesla T4:7.5:15,Tesla T4:7.5:15") simulates an
    inventory so that the policy and launch code paths can be tested on CPU.
    """
    fake = os.environ.get("KAGGLEKIT_FAKE_GPUS")
    if fake is not None:
        gpus = []
        for i, item in enumerate(x for x in fake.split(",") if x):
            name, cap, mem = item.split(":")
            major, minor = (int(p) for p in cap.split("."))
            gpus.append(GPU(i, name, float(mem), (major, minor), f"GPU-fake-{i}"))
        return gpus
    return _visible(_read_nvml(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def cuda_initialised() -> bool:
    """True when this process already holds a CUDA context (fork is then unsafe)."""
    import torch

    return bool(torch.cuda.is_initialized())
