"""Compressed volumes decoded once into memory-mapped ``.npy`` files, within a disk budget.

A crop of a compressed TIFF decodes every page it touches (a 96-deep crop of a 320^3 chunk
decodes 96 pages of 320 x 320); decoded once into an uncompressed ``.npy`` and memory-mapped,
every later crop reads only its own bytes. On Kaggle the cache lives under ``/kaggle/temp``
(large, not saved with the output), locally in the run's cache folder.

Decoding is shared safely: a file lock per volume, so two DDP ranks or loader workers decode it
once, and an atomic rename, so a killed decode leaves no half-written cache. ``plan`` fits the
cache to the disk up front (the Vesuvius training set decoded, images and labels, is about
50 GB, more than /kaggle/temp may hold): what does not fit is read by decoding each crop's pages,
and the plan says which volumes and what a crop of them costs.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import tiff
from .tiff import TiffVolume

MARGIN_BYTES = 2 * 2**30  # room left free for checkpoints and outputs


class VolumeCache:
    """Compressed volumes decoded once into memory-mapped ``.npy`` files under ``folder``.

    ``plan(volumes)`` decides up front which of them fit the disk (``budget_bytes``, else the
    folder's free space less ``MARGIN_BYTES``): those are decoded on first use, the rest are
    left out and read by decoding each crop's pages, and ``CachePlan`` says which and what that
    costs. Without a plan, volumes are decoded while the disk has room."""

    def __init__(self, folder: Path | str, budget_bytes: int | None = None):
        self.folder = Path(folder)
        self.budget_bytes = budget_bytes
        self.allowed: set[str] | None = None  # keys the plan caches (None: no plan)
        self._maps: dict[str, np.ndarray] = {}
        self._full = False

    @classmethod
    def for_run(cls, output_dir: Path, budget_bytes: int | None = None) -> VolumeCache:
        """``/kaggle/temp/kagglekit-volumes`` on Kaggle (large, not saved), else the run's
        ``cache/volumes``."""
        from ..machine import env
        here = env.where()
        if here.on_kaggle:
            return cls(here.temp / "kagglekit-volumes", budget_bytes)
        return cls(Path(output_dir) / "cache" / "volumes", budget_bytes)

    def key(self, volume: TiffVolume) -> str:
        stat = volume.path.stat()
        text = f"{volume.path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        return f"{volume.path.stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def path(self, volume: TiffVolume) -> Path:
        return self.folder / f"{self.key(volume)}.npy"

    def plan(self, volumes: list, patch: int | None = None) -> CachePlan:
        """Which of ``volumes`` to decode into the cache: those already there, then the others
        in the order given while they fit the budget. ``patch``: the crop edge the training
        reads, to measure what a left-out volume costs per crop."""
        self.folder.mkdir(parents=True, exist_ok=True)
        free = _free_bytes(self.folder)
        budget = self.budget_bytes if self.budget_bytes is not None else max(0, free - MARGIN_BYTES)
        compressed = list({self.key(v): v for v in volumes if v.decoder != "memmap"}.items())
        cached = [(k, v) for k, v in compressed if self.path(v).exists()]
        used, chosen, left_out = 0, [k for k, _ in cached], []
        for key, volume in compressed:
            if key in chosen:
                continue
            if used + volume.nbytes <= budget:
                chosen.append(key)
                used += volume.nbytes
            else:
                left_out.append(volume)
        self.allowed = set(chosen)
        cost = _crop_costs(left_out[0], patch) if left_out and patch else None
        return CachePlan(len(compressed), len(chosen), used, [v.path.name for v in left_out],
                         sum(v.nbytes for v in left_out), budget, free, cost)

    def mapped(self, volume: TiffVolume):
        """The volume as a read-only memory map, decoded first if needed; None when the plan
        left it out or the disk has no room for it (the caller decodes crops directly)."""
        key = self.key(volume)
        if key not in self._maps:
            path = self.folder / f"{key}.npy"
            if not path.exists():
                if self.allowed is not None and key not in self.allowed:
                    return None
                if not self._decode(volume, path):
                    return None
            self._maps[key] = np.load(path, mmap_mode="r")
        return self._maps[key]

    def _decode(self, volume: TiffVolume, path: Path) -> bool:
        self.folder.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_suffix(".lock")):
            if path.exists():  # another rank or worker decoded it while we waited
                return True
            if self._full or _free_bytes(self.folder) < volume.nbytes + MARGIN_BYTES:
                if not self._full:
                    warnings.warn(f"{self.folder} has no room for more decoded volumes: "
                                  "the rest are decoded page by page for every crop (slower)",
                                  stacklevel=4)
                self._full = True
                return False
            from ..state import atomic
            array = tiff.decode_pages(volume.path, range(volume.shape[0]), volume.compression)
            with atomic.atomic_path(path) as tmp:
                with open(tmp, "wb") as f:
                    np.save(f, array)
            path.with_suffix(".lock").unlink(missing_ok=True)  # a later caller finds the .npy
        return True


@dataclass
class CachePlan:
    """What ``VolumeCache.plan`` decided, and what the volumes it left out cost."""
    volumes: int  # compressed volumes asked about
    cached: int
    cached_bytes: int  # to be written (volumes already cached count nothing)
    left_out: list
    left_out_bytes: int
    budget_bytes: int
    free_bytes: int
    crop_ms: dict | None = None  # {"decoded": ms, "cached": ms} per crop, when measured

    def __str__(self) -> str:
        gb = 2**30
        if not self.left_out:
            return (f"volume cache: all {self.volumes} compressed volumes fit "
                    f"({self.cached_bytes / gb:.1f} GB to decode, {self.budget_bytes / gb:.1f} GB allowed)")
        text = (f"volume cache: {self.cached} of {self.volumes} compressed volumes fit "
                f"{self.budget_bytes / gb:.1f} GB ({self.free_bytes / gb:.1f} GB free); "
                f"{len(self.left_out)} left out ({self.left_out_bytes / gb:.1f} GB, e.g. "
                f"{', '.join(self.left_out[:3])}) are decoded crop by crop")
        if self.crop_ms:
            share = len(self.left_out) / self.volumes
            text += (f": {self.crop_ms['decoded']:.0f} ms a crop instead of "
                     f"{self.crop_ms['cached']:.1f} ms, for about {share:.0%} of the crops")
        return text

    def as_dict(self) -> dict:
        return {**asdict(self), "left_out": self.left_out[:20], "left_out_count": len(self.left_out)}


def _crop_costs(volume: TiffVolume, patch: int) -> dict:
    """Milliseconds for one ``patch`` crop of ``volume`` decoded from its pages, against the
    same crop read from a decoded copy (measured once, on a copy in memory)."""
    edge = min(patch, *volume.shape)
    started = time.perf_counter()
    pages = tiff.decode_pages(volume.path, range(edge), volume.compression)[:, :edge, :edge]
    decoded = time.perf_counter() - started
    started = time.perf_counter()
    np.array(pages[:edge, :edge, :edge])
    return {"decoded": round(1e3 * decoded, 2), "cached": round(1e3 * (time.perf_counter() - started), 3)}


def _free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
