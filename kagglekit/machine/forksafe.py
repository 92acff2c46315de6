"""Whether this process may still fork workers that use a GPU.

CUDA does not survive a fork of a process that opened the driver: the children's first CUDA
call fails ("initialization error") or hangs. ``torch.cuda.is_initialized()`` sees only what
torch did; other libraries open the same driver without torch knowing: LightGBM's GPU build
through NVIDIA's OpenCL (which sits on the CUDA driver), XGBoost and CuPy through CUDA, and
``torch.cuda.is_available()`` itself, which initialises the driver unless
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` makes it ask NVML (set here for this process: the kit's
launch forks). What the process has mapped tells whoever opened it: the driver's own
libraries appear in ``/proc/self/maps`` once loaded, and only then (torch, XGBoost and
LightGBM link the CUDA runtime or the OpenCL loader, never the driver, so that they import on
machines without one).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

# torch.cuda.is_available() asks NVML instead of initialising CUDA (torch reads it per call).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

# Libraries of the NVIDIA driver that are only mapped once something opened it.
DRIVER_LIBRARIES = {
    "libcuda.so": "the CUDA driver",
    "libnvidia-opencl.so": "NVIDIA's OpenCL driver (LightGBM's device_type='gpu')",
}
# Imported modules that open the driver when asked to train on a GPU.
GPU_LIBRARIES = ("lightgbm", "xgboost", "cupy", "numba", "tensorflow", "jax")


class ForkUnsafe(RuntimeError):
    """A GPU driver is open in this process: forked workers could not use the GPU."""


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


def torch_cuda_initialised() -> bool:
    """torch's own flag (reads nothing, initialises nothing)."""
    import torch
    return bool(torch.cuda.is_initialized())


def refuse_if_unsafe(what: str = "launch()") -> None:
    """Raise ForkUnsafe, naming who opened the driver and the fix, before any fork."""
    mapped = mapped_driver_libraries()
    if not mapped and not torch_cuda_initialised():
        return
    opened = [f"{p} ({_describe(p)})" for p in mapped] or ["torch (torch.cuda was initialised)"]
    suspects = [m for m in GPU_LIBRARIES if m in sys.modules]
    raise ForkUnsafe(
        f"{what} cannot fork worker processes: a GPU driver is already open in this notebook's "
        f"process: {'; '.join(opened)}. "
        + (f"Imported here and able to open it: {', '.join(suspects)}. " if suspects else "")
        + "Forked workers could not use the GPU. Restart the kernel and keep every GPU use "
        "(model.cuda(), torch.cuda.*, a GPU tree model) inside the launched function, or train "
        "GPU trees through kk.launcher.isolated(...), which runs them in a process of their own.")


def _describe(path: str) -> str:
    name = os.path.basename(path)
    return next(what for lib, what in DRIVER_LIBRARIES.items() if name.startswith(lib))
