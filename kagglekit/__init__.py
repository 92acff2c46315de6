"""kagglekit: fast, unkillable PyTorch training in Kaggle notebooks.

Submodules are imported on first use, so ``import kagglekit`` costs little more
than ``import torch`` (torch_geometric, optuna, matplotlib and kaggle are heavy).
The face is flat: ``kk.<module>`` for every public module, ``kk.<name>`` for the few
names every notebook calls, ``kk.<room>`` for a kind of data, its reader's names on it
(``kk.images.read_competition`` is ``images/folder.py``'s, ``kk.text.load_classifier``
``text/classifier.py``'s). ``__init__.pyi`` says the same
to mypy and editors, written from these tables by ``python -m kagglekit.tools.facestub``
(tests/test_face.py keeps the two equal).
"""
from __future__ import annotations

import importlib

from .machine import driver as _driver  # noqa: F401 (torch.cuda.is_available() asks NVML, never the driver)
from .machine.version import __version__  # noqa: F401 (the package face shows it)

# The floors: generic machinery, each part importing only the parts listed above it.
_FLOORS = {
    "machine": ("version", "env", "cards", "gpus", "driver", "emulate", "ascard", "precision", "int8", "cpuhalf",
                "budget", "inputs", "display", "signals", "packages"),
    "parallel": ("ranks", "mapped", "forkserver", "heartbeat", "forked", "launcher", "ranklog", "loaders",
                 "batches", "workers"),
    "state": ("atomic", "rng", "space", "keys", "reads", "identity", "cache", "snapshot", "found", "checkpoint",
              "published"),
    "readers": ("decoding", "csvfile", "datasets", "labelsets", "filecheck", "pretrained"),
    "loop": ("train", "epochs", "step", "halving", "fitoptions", "fitstate", "durable", "resuming", "restarts",
             "fallback", "accel", "cudagraph", "guards", "progress", "monitor", "memory", "schedule", "probe",
             "scalerhealth", "batchsize", "batchplan", "ema"),
    "score": ("metrics", "evaluate", "scoring", "multilabel", "hillclimb", "stacking", "choice", "probabilities"),
    "submit": ("submission", "serving", "rerunplan", "blend", "oofsources", "export"),
    "run": ("context", "datadir", "report", "scratch", "unit", "params", "contract", "paths", "splitters", "plots",
            "foldresults", "oofio", "turns", "folds", "workpool", "zoo", "distill", "rounds"),
    "search": ("tune", "sizing", "studyreport", "studystore", "boosting"),
    "llm": ("llmshards", "hfbackend", "vllmbackend", "llmengine", "voting", "vllmcheck", "llmexport", "llmquant"),
}
# The rooms, one per kind of data a competitor enters by; each imports floors only.
# ``kk.images`` is the room itself, its reader's names on it (readers/face.py).
_ROOMS = {
    "images": ("imagesets", "augment2d", "backbones"),
    "volumes": ("tiff", "volumecache", "augment3d", "segment3d", "postprocess3d", "surfacescore"),
    "audio": ("audiosynth", "mel", "birdnet"),
    "graphs": ("graph", "graphsets"),
    "tables": ("competition", "playground", "timeseries", "windows", "gbdt", "models"),
    "text": ("textsets", "translation", "manpages", "prompts", "answerhead", "pooledhead",
             "textprobe", "sft", "textscore", "textstudent", "testpredict"),
    "studies": ("cycles", "figures"),
}
_SUBMODULES = {name: f"{part}.{name}" for part, names in (_FLOORS | _ROOMS).items() for name in names}
_SUBMODULES |= {room: room for room in _ROOMS}
_EXPORTS = {
    "start": "context",
    "Run": "context",
    "Unfinished": "unit",
    "fit": "train",
    "supervised": "train",
    "EarlyStopping": "fitstate",
    "FitResult": "fitstate",
    "Stop": "fitoptions",
    "Ema": "ema",
    "Speed": "fitoptions",
    "Monitor": "fitoptions",
    "Alone": "fitoptions",
    "CheckpointManager": "checkpoint",
    "make_loader": "loaders",
    "Budget": "budget",
    "seed_everything": "env",
    "launch": "launcher",
    "headline": "display",
}

__all__ = sorted(set(_SUBMODULES) | set(_EXPORTS) | {"__version__"})


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_SUBMODULES[_EXPORTS[name]]}", __name__), name)
    raise AttributeError(f"module 'kagglekit' has no attribute {name!r}")


def __dir__():
    return __all__
