"""``make data NB=``: your own copy of the data a kernel attaches, downloaded by the real CLI.

Every ``competition_sources`` and ``dataset_sources`` entry of ``kernel-metadata/<NB>.json``
lands unzipped in ``data/<slug>/`` (``kaggle competitions download`` / ``kaggle datasets
download``). A local run finds it when ``data_dir`` names the slug (``make run`` puts
``data/`` among the inputs, as ``/kaggle/input`` is on Kaggle), and ``make sandbox DATA=``
mounts it where Kaggle mounts the source: the real files tested before any GPU quota is spent.

A download is extracted beside its final place and renamed into it when complete, so an
interrupted one never looks like data; a folder already complete is kept (``FORCE=1``
downloads again).
"""
from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from . import kaggle_cli

DONE = ".complete"


def data_root() -> Path:
    """``data/`` (``KAGGLEKIT_DATA`` moves it, e.g. for tests)."""
    return Path(os.environ.get("KAGGLEKIT_DATA", "data"))


def sources(meta: dict) -> list[tuple[str, str]]:
    """("competition" | "dataset", reference) of every source to download (the kit's own
    wheels dataset aside; a versioned reference keeps its version)."""
    found = [("competition", c) for c in meta.get("competition_sources", [])]
    found += [("dataset", d) for d in meta.get("dataset_sources", [])
              if not d.split("/")[1].startswith("kagglekit-wheels")]
    return found


def folder_of(kind: str, reference: str, root: Path) -> Path:
    """``data/<slug>``: the flat layout an attached source also has on Kaggle."""
    return root / (reference if kind == "competition" else reference.split("/")[1])


def download(kind: str, reference: str, root: Path | None = None, force: bool = False) -> Path:
    """One source into ``data/<slug>/``, unzipped; its folder."""
    dest = folder_of(kind, reference, root or data_root())
    if (dest / DONE).exists() and not force:
        print(f"{reference}: already in {dest}/ (FORCE=1 downloads it again)")
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        if kind == "competition":
            kaggle_cli.download_competition(reference, partial)
        else:
            kaggle_cli.download_dataset(reference, partial)
        for archive in sorted(partial.glob("*.zip")):  # a competition arrives as one zip
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(partial)
            archive.unlink()
        (partial / DONE).write_text(reference + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    files = sum(1 for p in dest.rglob("*") if p.is_file()) - 1
    print(f"{reference}: {files} files -> {dest}/")
    return dest
