"""``data_dir`` as a pipeline reads it: the folder that holds the competition's files.

What users give is not always that folder: the competition's ``train.csv`` itself (copied from a
file browser), or the folder above it (a download unzipped into a folder of its own). Each is read
as what it means, said in one line; a folder without the files is refused naming what it lacks. A
folder whose files are spread over sub-folders (train/ beside test/) is the pipeline reader's to
search, as before.
"""
from __future__ import annotations

from pathlib import Path

from ..machine import env
from ..machine.display import notice
from ..readers import filecheck


class DataDirError(FileNotFoundError):
    """``data_dir`` names no folder with the pipeline's files."""


TABLES = (".csv", ".parquet")  # what a pipeline reading a table reads


def resolve(value: str, required: list[str] | tuple[str, ...] = (), table: bool = False) -> Path | None:
    """The folder (or, where the pipeline reads a ``table``, the file) ``value`` names: a local path
    or the ``owner/slug`` of an attached source; None when empty. ``required``: file names the
    pipeline needs in that folder (or, said, in the one sub-folder that holds them all)."""
    if not value:
        return None
    path = env.local_or_attached(value)
    if path.is_file() and not table:
        notice(f"data_dir={value!r} is a file: reading the competition's folder {path.parent}")
        path = path.parent
    if path.is_file():
        return path
    if not path.is_dir():
        raise DataDirError(f"data_dir={value!r} does not exist: no folder and no attached Kaggle source (owner/slug "
                           "under /kaggle/input, or data/<slug> locally after `make data`). Leave data_dir empty for "
                           "the built-in data, or attach the dataset (dataset_sources in kernel-metadata) and give "
                           "its owner/slug or folder.")
    return _holding(path, value, list(required), table)


def _holds(folder: Path, required: list[str], table: bool) -> bool:
    """Does ``folder`` itself hold the required files (a pipeline reading a table: a table)?"""
    if required or not table:
        return all((folder / name).exists() for name in required)
    return any(p.suffix.lower() in TABLES for p in folder.iterdir())


def _holding(path: Path, value: str, required: list[str], table: bool = False) -> Path:
    """``path``, or, when it holds nothing but one folder (an archive unpacked into a folder of its
    own, stray files aside), the folder down that line where the required files (or a table) are."""
    missing = [name for name in required if not any(path.rglob(name))]
    if missing:
        raise DataDirError(f"data_dir={value!r} lacks {', '.join(missing)}: this pipeline needs "
                           f"{', '.join(required)} somewhere under it.")
    here = path
    while not _holds(here, required, table):
        entries = [e for e in here.iterdir() if not filecheck.stray(e.name)]
        if len(entries) != 1 or not entries[0].is_dir():
            return path  # the files are spread under it: the pipeline's reader looks for them there
        here = entries[0]
    if here != path:
        notice(f"data_dir={value!r}: the competition's files are in {here}: reading that folder")
    return here
