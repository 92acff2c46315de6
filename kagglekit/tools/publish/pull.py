"""``make pull NB=``: a notebook edited on Kaggle comes back into notebooks/.

What the build added is taken out again (the install cell, the injected Kaggle
parameters, the kit's provenance, outputs and execution counts), the kernel's
metadata as Kaggle now holds it is merged into ``kernel-metadata/<name>.json``, and a
short summary says what changed. Local edits not yet committed are never overwritten.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from . import kaggle_cli
from .build import INSTALL_MARK

# kernel-metadata fields Kaggle's copy may change, and their names in `pull -m`'s file.
MERGED = {"title": "title", "is_private": "is_private", "enable_internet": "enable_internet",
          "machine_shape": "machine_shape", "dataset_sources": "dataset_sources",
          "competition_sources": "competition_sources", "kernel_sources": "kernel_sources",
          "model_sources": "model_sources", "keywords": "keywords"}
PREFIXES = ("code/", "dataset/", "datasets/", "competition/", "competitions/", "models/")


class PullRefused(RuntimeError):
    """Pulling would overwrite local work."""


def uncommitted(paths: list[Path]) -> list[str]:
    """Those of ``paths`` with changes git has not committed."""
    out = subprocess.run(["git", "status", "--porcelain", "--", *map(str, paths)],
                         capture_output=True, text=True).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def strip(nb: dict) -> dict:
    """The notebook as committed: without what ``build`` added or a run left in it."""
    cells = []
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "kagglekit-install" in tags or source.startswith(INSTALL_MARK) or \
                "injected-parameters" in tags:
            continue
        cell["source"] = source
        for key in ("papermill", "execution", "_kg_hide-input", "_kg_hide-output", "trusted"):
            cell.get("metadata", {}).pop(key, None)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
    nb["cells"] = cells
    for key in ("kagglekit", "papermill", "widgets"):
        nb["metadata"].pop(key, None)
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _sources(items: list, kernel: str) -> list:
    """Sources without `pull -m`'s type prefixes, and without the kernel's own output
    (``resume_from_previous_version`` adds that one at push)."""
    out = []
    for item in items or []:
        for prefix in PREFIXES:
            item = item.removeprefix(prefix)
        if item.split("/")[:2] != kernel.split("/")[:2]:
            out.append(item)
    return out


def merge(local: dict, pulled: dict, kernel: str) -> tuple[dict, list[str]]:
    """``local`` kernel-metadata updated from Kaggle's copy; the changed fields."""
    merged, changed = dict(local), []
    for ours, theirs in MERGED.items():
        if theirs not in pulled or pulled[theirs] is None:
            continue
        value = pulled[theirs]
        if ours.endswith("_sources"):
            value = _sources(value, kernel)
        if merged.get(ours, [] if ours.endswith("sources") else None) != value:
            changed.append(f"{ours}: {merged.get(ours)!r} -> {value!r}")
            merged[ours] = value
    return merged, changed


def cell_changes(old: dict, new: dict) -> str:
    """"N cells changed, M added, K removed" between two notebooks."""
    a = ["".join(c["source"]) for c in old["cells"]]
    b = ["".join(c["source"]) for c in new["cells"]]
    import difflib
    ops = difflib.SequenceMatcher(a=a, b=b).get_opcodes()
    changed = sum(min(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag == "replace")
    added = sum(max(0, (j2 - j1) - (i2 - i1)) for tag, i1, i2, j1, j2 in ops if tag in ("replace", "insert"))
    removed = sum(max(0, (i2 - i1) - (j2 - j1)) for tag, i1, i2, j1, j2 in ops if tag in ("replace", "delete"))
    return f"{changed} cell(s) changed, {added} added, {removed} removed"


def pull(name: str, kernel: str, notebooks_dir: Path, metadata_dir: Path,
         force: bool = False) -> list[str]:
    """Bring ``kernel`` back as ``notebooks/<name>.ipynb``; lines summarising the change."""
    notebook, meta_path = notebooks_dir / f"{name}.ipynb", metadata_dir / f"{name}.json"
    dirty = uncommitted([notebook, meta_path])
    if dirty and not force:
        raise PullRefused(f"{', '.join(dirty)} has uncommitted changes: commit or stash them "
                          "first (or FORCE=1 to overwrite them)")
    with tempfile.TemporaryDirectory(prefix="kagglekit-pull-") as tmp:
        code_file, pulled_meta = kaggle_cli.pull(kernel, Path(tmp))
        pulled = strip(json.loads(code_file.read_text()))
    local_meta = json.loads(meta_path.read_text())
    merged, fields = merge(local_meta, pulled_meta, kernel)
    summary = [f"{notebook}: {cell_changes(json.loads(notebook.read_text()), pulled)}"]
    summary += [f"{meta_path}: {f}" for f in fields] or [f"{meta_path}: unchanged"]
    notebook.write_text(json.dumps(pulled, indent=1, ensure_ascii=False) + "\n")
    meta_path.write_text(json.dumps(merged, indent=2) + "\n")
    return summary
