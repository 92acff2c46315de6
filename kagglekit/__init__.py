"""kagglekit: fast, unkillable PyTorch training in Kaggle notebooks.

Submodules are imported on first use, so ``import kagglekit`` costs little more
than ``import torch`` (torch_geometric, optuna, matplotlib and kaggle are heavy).
"""
from __future__ import annotations

import importlib

from .machine import driver as _driver  # noqa: F401 (torch.cuda.is_available() asks NVML, never the driver)
from .machine.version import __version__  # noqa: F401 (the package face shows it)

# The public names, each in the part that owns it (see each part's docstring).
_PARTS = {
    "machine": ["version", "env", "cards", "gpus", "driver", "emulate", "ascard", "precision", "int8", "cpuhalf",
                "budget", "inputs", "display", "signals", "packages"],
    "parallel": ["ranks", "mapped", "forkserver", "heartbeat", "forked", "launcher", "ranklog", "loaders", "batches",
                 "workers"],
    "state": ["atomic", "rng", "space", "keys", "reads", "identity", "cache", "snapshot", "found", "checkpoint",
              "published"],
    "readers": ["decoding", "tiff", "volumecache", "volumes", "csvfile", "graphsets", "timeseries", "windows", "tables",
                "datasets", "graph", "textsets", "translation", "images", "imagesets", "labelsets", "filecheck",
                "audio", "audiosynth", "manpages", "pretrained", "competition", "playground"],
    "loop": ["train", "epochs", "step", "halving", "fitoptions", "fitstate", "durable", "resuming", "restarts",
             "fallback", "accel", "cudagraph", "guards", "progress", "monitor", "memory", "schedule", "probe",
             "scalerhealth", "batchsize", "ema"],
    "score": ["metrics", "evaluate", "scoring", "multilabel", "textscore", "hillclimb", "stacking", "choice"],
    "submit": ["submission", "serving", "rerunplan", "blend", "oofsources", "export"],
    "run": ["context", "report", "scratch", "unit", "params", "contract", "paths", "splitters", "plots",
            "foldresults", "oofio", "turns", "folds", "workpool", "zoo"],
    "search": ["tune", "sizing", "studyreport", "studystore", "boosting"],
    "llm": ["llmshards", "hfbackend", "llmengine", "voting", "vllmcheck", "llmexport", "llmquant"],
    "tasks": ["segment3d", "postprocess3d", "augment3d", "models", "cycles", "text", "prompts", "answerhead",
              "figures", "gbdt", "surfacescore", "augment2d", "mel", "sft", "backbones", "textprobe", "pooledhead",
              "birdnet"],
}
_SUBMODULES = {name: f"{part}.{name}" for part, names in _PARTS.items() for name in names}
_EXPORTS = {
    "start": "context", "Run": "context", "Unfinished": "unit",
    "fit": "train", "supervised": "train", "EarlyStopping": "fitstate", "FitResult": "fitstate",
    "Stop": "fitoptions", "Ema": "ema", "Speed": "fitoptions", "Monitor": "fitoptions", "Alone": "fitoptions",
    "CheckpointManager": "checkpoint", "make_loader": "loaders", "Budget": "budget",
    "seed_everything": "env", "launch": "launcher", "headline": "display",
}

__all__ = sorted(set(_SUBMODULES) | set(_EXPORTS) | set(_PARTS) | {"__version__"})


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_SUBMODULES[_EXPORTS[name]]}", __name__), name)
    raise AttributeError(f"module 'kagglekit' has no attribute {name!r}")


def __dir__():
    return __all__
