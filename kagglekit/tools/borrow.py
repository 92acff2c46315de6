"""Another pipeline's model, as its own notebook defines it, carried into a notebook that measures it.

A notebook shows its pipeline: the U-Net lives in ``segmentation_3d``, the sequence models in
``sequence_models``. A notebook that measures them (``gpu_figures``) must measure *those*
models, the user's edits included, not copies that drift. So it has one code cell tagged
``borrowed`` whose metadata names the pipelines (``"borrow": ["segmentation_3d", ...]``); when
the notebook is run (``make run``) or built for Kaggle (``make push``, the sandbox), that cell is
filled with each pipeline's parameters (its notebook's defaults and the Kaggle ones of its
kernel metadata) and the source of its cells tagged ``model``, as a Python literal the kernel
reads offline (``kk.figures.pipeline`` runs it). The file in ``notebooks/`` keeps the empty cell.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

TAG, MODEL_TAG = "borrowed", "model"
HEADER = ("# Filled when this notebook is run (make run) or built (make push): each borrowed pipeline's\n"
          "# parameters (its notebook's defaults and its Kaggle ones) and its cells tagged \"model\".\n"
          "# Edit a model in its own notebook; this cell is written again from it every run.\n")


class BorrowError(ValueError):
    """A borrowed pipeline has no notebook or no cell tagged ``model``."""


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _tags(cell: dict) -> list:
    return cell.get("metadata", {}).get("tags", [])


def pipeline(name: str, notebooks_dir: Path, metadata_dir: Path) -> dict:
    """``{"defaults", "kaggle", "source"}`` of pipeline ``name``."""
    from ..run.params import assignments
    path = notebooks_dir / f"{name}.ipynb"
    if not path.exists():
        raise BorrowError(f"borrowed pipeline {name!r}: no {path}; name a notebook in notebooks/")
    every = json.loads(path.read_text())["cells"]
    cells = [c for c in every if MODEL_TAG in _tags(c)]
    if not cells:
        raise BorrowError(f"borrowed pipeline {name!r}: {path} has no code cell tagged 'model' "
                          "(tag the cells that define its model and loss)")
    defaults = assignments("".join(_source(c) for c in every if "parameters" in _tags(c)))
    meta_path = metadata_dir / f"{name}.json"
    kaggle = {**defaults, **(json.loads(meta_path.read_text()).get("parameters", {})
                             if meta_path.exists() else {})}
    return {"defaults": defaults, "kaggle": kaggle, "source": "\n\n".join(_source(c) for c in cells)}


def _literal(entries: dict) -> str:
    lines = ["BORROWED = {"]
    for name, entry in entries.items():
        lines += [f"    {name!r}: {{", f"        \"defaults\": {entry['defaults']!r},",
                  f"        \"kaggle\": {entry['kaggle']!r},",
                  f"        \"source\": {_text(entry['source'])},", "    },"]
    return "\n".join([*lines, "}"])


def _text(source: str) -> str:
    """The source as a readable triple-quoted literal where that is exact, else its repr."""
    if "'''" in source or "\\" in source or source.endswith("'"):
        return repr(source)
    return "'''\n" + source + "\n'''"


def fill(notebook: dict, notebooks_dir: Path, metadata_dir: Path) -> bool:
    """Fill every cell tagged ``borrowed`` in place; False when there is none."""
    filled = False
    for cell in notebook["cells"]:
        if TAG in _tags(cell):
            names = cell["metadata"].get("borrow", [])
            entries = {n: pipeline(n, notebooks_dir, metadata_dir) for n in names}
            cell["source"] = HEADER + _literal(entries) + "\n"
            filled = True
    return filled


def filled_copy(notebook: Path, folder: Path, metadata_dir: Path | None = None) -> Path:
    """``notebook`` itself when it borrows nothing, else a filled copy written in ``folder``
    (the pipelines' notebooks beside it; their metadata in ``kernel-metadata/`` of its checkout)."""
    notebook = Path(notebook)
    nb = json.loads(notebook.read_text())
    metadata_dir = Path(metadata_dir or notebook.resolve().parent.parent / "kernel-metadata")
    if not fill(nb, notebook.parent, metadata_dir):
        return Path(notebook)
    out = Path(tempfile.mkdtemp(dir=folder)) / notebook.name
    out.write_text(json.dumps(nb, indent=1))
    return out
