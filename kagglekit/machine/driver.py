"""Has this process opened a GPU driver? Said, never refused.

CUDA does not survive a fork of a process that opened the driver, which is why the kit's
processes are forked from a clean server (``parallel.forkserver``) and never from the
notebook's: the notebook may open the driver (a tensor on ``cuda:0``, a GPU tree model) and
still launch. ``torch.cuda.is_initialized()`` sees only what torch did; other libraries open
the same driver without torch knowing: LightGBM's GPU build through NVIDIA's OpenCL (which sits
on the CUDA driver), XGBoost and CuPy through CUDA. What the process has mapped tells whoever
opened it: the driver's own libraries appear in ``/proc/self/maps`` once loaded, and only then
(torch, XGBoost and LightGBM link the CUDA runtime or the OpenCL loader, never the driver, so
that they import on machines without one).

``torch.cuda.is_available()`` initialises the driver unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``
makes it ask NVML: set here for this process, so that asking costs no GPU memory.
"""
from __future__ import annotations

import os
from pathlib import Path

# torch.cuda.is_available() asks NVML instead of initialising CUDA (torch reads it per call).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

# Libraries of the NVIDIA driver that are only mapped once something opened it.
DRIVER_LIBRARIES = {
    "libcuda.so": "the CUDA driver",
    "libnvidia-opencl.so": "NVIDIA's OpenCL driver (LightGBM's device_type='gpu')",
}


def mapped_driver_libraries(maps: Path | str = "/proc/self/maps") -> list[str]:
    """Paths of the driver's libraries this process has mapped (empty where /proc is absent)."""
    try:
        lines = Path(maps).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:  # address perms offset device inode [path]
        fields = line.split(maxsplit=5)
        path = fields[5].strip() if len(fields) == 6 else ""
        if os.path.basename(path).startswith(tuple(DRIVER_LIBRARIES)) and path not in found:
            found.append(path)
    return found


def opened() -> list[str]:
    """Who opened a GPU driver in this process, in words (empty: nobody)."""
    import torch
    found = [f"{p} ({_describe(p)})" for p in mapped_driver_libraries()]
    if torch.cuda.is_initialized() and not found:
        found.append("torch (torch.cuda was initialised)")
    return found


def _describe(path: str) -> str:
    name = os.path.basename(path)
    return next(what for lib, what in DRIVER_LIBRARIES.items() if name.startswith(lib))
