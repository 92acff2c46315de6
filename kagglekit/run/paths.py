"""The path parameters (``contract``: ``*_dir``, ``*_csv``, ``*sources``) found before any work.

A folder or a file here, or an attached Kaggle source named by ``owner/slug`` in either input
layout (``make data`` puts local copies under ``data/``, one of the input roots): each path a
run was given exists, or the run stops in its first cell naming the parameter and the fix, not
hours later where the pipeline first opens it. ``model_dir`` is a pretrained model: its
``config.json`` is found where Kaggle mounts Kaggle Models and datasets (``readers.pretrained``),
and a folder holding several models, or none, is refused naming them. ``*sources`` are
comma-separated lists of such references (a local run's folder whose name holds commas kept whole).
"""
from __future__ import annotations

from pathlib import Path

from ..machine import env
from ..submit.blend import split_sources  # a run folder named with commas (folds=3,seed=1) is one source
from .contract import ParameterError, declarations

MODEL = "model_dir"  # a pretrained model's folder, Kaggle Model handle or dataset


class PathError(ParameterError, FileNotFoundError):
    """A path parameter names nothing here nor among the attached inputs."""


def check(source: str, values: dict, roots: list[Path] | None = None) -> None:
    """Raise PathError for the first path parameter of ``values`` (non-empty) that names nothing;
    ``roots``: where attached inputs are (default: this machine's)."""
    roots = env.where().input_roots if roots is None else roots
    declared = declarations(source)
    for name, value in values.items():
        if name in declared and declared[name].path and isinstance(value, str) and value.strip():
            for reference in (split_sources(value) if name.endswith("sources") else [value]):
                if reference.strip():
                    find(name, reference.strip(), roots)


def find(name: str, reference: str, roots: list[Path]) -> Path:
    """The folder or file ``reference`` names (parameter ``name``); PathError when none."""
    if name == MODEL:
        from ..readers.pretrained import ModelDirError, find_model_dir
        try:
            return find_model_dir(reference, roots)
        except ModelDirError as err:
            raise PathError(str(err)) from None
    path = env.local_or_attached(reference, roots)
    if not path.exists():
        raise PathError(f"{name}={reference!r} does not exist: no folder or file of that name here, and no attached "
                        f"Kaggle source (owner/slug under {', '.join(str(r) for r in roots) or 'the inputs'}; "
                        "locally `make data NB=...` downloads a kernel's sources into data/). Leave it empty, or give "
                        "a folder, a file or an attached source's owner/slug.")
    return path
