"""Crash-safe file writes: a temporary file in the same folder, fsync, rename.

A kill at any moment leaves either the old file or the new one, never a torn
one: ``os.replace`` is atomic within a filesystem, and the fsyncs make the data
(and the rename) durable before the caller is told it is saved.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # what open() would give: mkstemp's 0600 is for its own secrecy


@contextmanager
def atomic_path(path: Path | str):
    """Yield a temporary path next to ``path``; on success it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, _MODE)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(folder: Path | str):
    """Yield a temporary folder beside ``folder`` to fill; on success it becomes ``folder``
    whole (a killed writer leaves no half folder for the next run to read). When another
    process put ``folder`` there first, theirs stays and this one is dropped."""
    import shutil
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder.parent))
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        os.replace(partial, folder)
    except OSError:  # another writer's folder is already in place (a rename onto it fails)
        shutil.rmtree(partial, ignore_errors=True)
        if not folder.is_dir():
            raise


def write_once(folder: Path | str, write, *args, marker: str = "sample_submission.csv") -> Path:
    """``folder`` filled by ``write(partial, *args)`` whole or not at all (``atomic_folder``), once: a
    folder that holds its ``marker`` is taken as written (the stand-in competitions' idiom)."""
    folder = Path(folder)
    if not (folder / marker).exists():
        with atomic_folder(folder) as partial:
            write(partial, *args)
    return folder


def write_bytes(path: Path | str, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: Path | str, obj) -> None:
    write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def is_temporary(path: Path) -> bool:
    """Leftovers of a write that was killed: ignore them, never load them."""
    return path.name.startswith(".") and path.name.endswith(".tmp")
