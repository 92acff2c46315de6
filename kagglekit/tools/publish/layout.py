"""Where the Kaggle tooling keeps what it builds and publishes, and what each publication is called.

Apart from the modules that build and upload, so that the metadata (which names a publication in
the kernel-metadata.json it writes) reads these names without importing the uploaders.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

FRAMEWORK = "pyTorch"  # torch.save checkpoints (adapters and heads; a base model is attached apart)
VARIATION = "default"


def build_root() -> Path:
    """Where builds go: ``build/kaggle`` (``KAGGLEKIT_BUILD`` moves it, e.g. for tests)."""
    return Path(os.environ.get("KAGGLEKIT_BUILD", "build/kaggle"))


def weights_slug(meta: dict) -> str:
    """The publication's name: ``<kernel slug>-weights`` (a dataset, or a Kaggle Model)."""
    return f"{meta['slug']}-weights"


def weights_folder(meta: dict) -> Path:
    """Where the publication is assembled (and stays, as the sandbox mounts it)."""
    return build_root().parent / "publish" / weights_slug(meta)


def model_handle(owner: str, meta: dict, variation: str = VARIATION) -> str:
    """``owner/model/framework/variation`` (no version) of kernel ``meta``'s weights as a Model."""
    return f"{owner}/{weights_slug(meta)}/{FRAMEWORK}/{variation}"


def model_record_path(meta: dict) -> Path:
    """Where the last Model version published is remembered (beside the assembled folder)."""
    folder = weights_folder(meta)
    return folder.with_name(f"{folder.name}.model.json")


def model_record(meta: dict) -> dict | None:
    """``{"handle", "version", "files"}`` of the last ``TO=model`` publication, or None."""
    path = model_record_path(meta)
    return json.loads(path.read_text()) if path.exists() else None


def model_source(trained: dict, owner: str) -> str:
    """The ``model_sources`` entry (``.../<version>``) of ``trained``'s weights: the recorded version,
    else (a local build, the sandbox) the first version a publication would create."""
    found = model_record(trained)
    return f"{found['handle']}/{found['version']}" if found else f"{model_handle(owner, trained)}/1"
