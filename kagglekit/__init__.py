"""kagglekit: fast, unkillable PyTorch training in Kaggle notebooks.

Submodules are imported on first use, so ``import kagglekit`` costs little more
than ``import torch`` (torch_geometric, optuna, matplotlib and kaggle are heavy).
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = {"accel", "atomic", "boosting", "budget", "cache", "checkpoint", "cudagraph", "cycles", "data", "datasets", "display",
               "durable", "env", "evaluate", "fitoptions", "fitstate", "gpus", "graph", "graphsets", "identity", "inputs",
               "launcher", "memory", "metrics", "models", "monitor", "params", "plots", "policy", "precision",
               "progress", "ranks", "rng", "run", "segment3d", "step", "timeseries", "train",
               "tune", "volumes", "workcap"}
_EXPORTS = {
    "start": "run", "Run": "run",
    "fit": "train", "supervised": "train", "EarlyStopping": "fitstate", "FitResult": "fitstate",
    "Speed": "fitoptions", "Durability": "fitoptions", "Watch": "fitoptions",
    "CheckpointManager": "checkpoint", "make_loader": "data", "Budget": "budget",
    "seed_everything": "env", "launch": "launcher", "headline": "display",
}

__all__ = sorted(_SUBMODULES | set(_EXPORTS) | {"__version__"})


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'kagglekit' has no attribute {name!r}")


def __dir__():
    return __all__
