"""Skip-if-cached results: a rerun whose inputs did not change skips its training.

An entry's key hashes three things: the config (canonical JSON), a fingerprint of
the data (content hashes of tensors, arrays and files), and the code (the kit's
version plus the source of the model, or an explicit version string). Change any
of them and the entry misses.

Entries live in ``<working>/cache/<name>/<key>/``: the value in a format that
cannot run code when loaded (torch with ``weights_only=True``, JSON, XGBoost's
own UBJSON model format, LightGBM's own text model format) and ``meta.json`` with
its sha256. On Kaggle a miss in the working dir is looked up in the attached
inputs (the previous kernel version's output) and a hit there is copied over, so
the next version has it too.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..machine import env
from . import atomic


class CacheWarning(UserWarning):
    """A cache entry was corrupt and is being recomputed."""


# ---- keys --------------------------------------------------------------------
def _hash_tensor(t: torch.Tensor, h) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def _hash_file(path: Path, h, full_below: int = 4 * 2**20) -> None:
    """Whole content below 4 MB; above, size plus 64 KB samples at 16 offsets: a competition's
    1,600 volumes of tens of MB each are fingerprinted in seconds, not minutes (a new version of
    a file changes its size or the bytes sampled; a mount never changes under a kernel)."""
    size = path.stat().st_size
    h.update(f"{path.name}:{size}".encode())
    with open(path, "rb") as f:
        if size <= full_below:
            while block := f.read(1 << 20):
                h.update(block)
            return
        for i in range(16):
            f.seek(size * i // 16)
            h.update(f.read(1 << 16))


def _feed(obj, h) -> None:
    if isinstance(obj, torch.Tensor):
        _hash_tensor(obj, h)
    elif isinstance(obj, np.ndarray):
        _hash_tensor(torch.from_numpy(np.ascontiguousarray(obj)), h)
    elif isinstance(obj, Path):
        paths = sorted(p for p in obj.rglob("*") if p.is_file()) if obj.is_dir() else [obj]
        for p in paths:
            _hash_file(p, h)
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            _feed(obj[k], h)
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}{len(obj)}".encode())
        for item in obj:
            _feed(item, h)
    elif hasattr(obj, "tensors"):  # TensorDataset
        _feed(list(obj.tensors), h)
    elif hasattr(obj, "dataset") and hasattr(obj, "indices"):  # Subset
        _feed([obj.dataset, list(obj.indices)], h)
    elif type(obj).__module__.startswith("torch_geometric") and hasattr(obj, "to_dict"):
        _feed(obj.to_dict(), h)  # a PyG graph: every node, edge and mask tensor
    else:
        text = json.dumps(obj, sort_keys=True, default=repr)
        if " at 0x" in text:  # a repr with a memory address: different every run
            raise TypeError(f"cannot fingerprint a {type(obj).__name__} by its content; pass "
                            "its tensors, arrays, files or folder instead")
        h.update(text.encode())


def fingerprint(data) -> str:
    """Content hash of tensors, arrays, TensorDatasets and Subsets of them, PyG graphs,
    files and folders, nested freely in lists, tuples and dicts. Other objects raise
    TypeError (hashing their repr would change every run)."""
    h = hashlib.sha256()
    _feed(data, h)
    return h.hexdigest()


def code_version(code) -> str:
    """The kit's version plus ``code``: a string as given, the source of a function,
    class or module, or a list of those."""
    from ..machine.version import __version__
    if code is None:
        text = ""
    elif isinstance(code, str):
        text = code
    elif isinstance(code, (list, tuple)):
        text = "\n".join(code_version(c) for c in code)
    else:
        text = _source(code)
    return f"kagglekit {__version__}\n{text}"


def _source(obj) -> str:
    """``inspect.getsource``; for a class defined in a notebook (whose source inspect
    cannot find) the sources of its methods, which IPython does keep."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        if not inspect.isclass(obj):
            raise
        methods = [f for f in vars(obj).values() if inspect.isfunction(f)]
        return f"class {obj.__qualname__}{obj.__bases__}\n" + "\n".join(map(inspect.getsource, methods))


def key(config: dict, data=None, code=None) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    parts = [canonical, fingerprint(data) if data is not None else "", code_version(code)]
    return hashlib.sha256("\n\0".join(parts).encode()).hexdigest()[:32]


# ---- formats that cannot run code when loaded -----------------------------------
def _has_tensor(value) -> bool:
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        return True
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    return False


def _kind_of(value) -> str:
    for library in ("xgboost", "lightgbm"):
        if type(value).__module__.startswith(library):
            return library
    return "torch" if _has_tensor(value) else "json"


_FILES = {"torch": "value.pt", "json": "value.json", "xgboost": "value.ubj",
          "lightgbm": "value.txt"}


def _write(value, kind: str, path: Path) -> None:
    with atomic.atomic_path(path) as tmp:
        if kind == "torch":
            if isinstance(value, torch.nn.Module):
                value = value.state_dict()  # weights, never a pickled class
            torch.save(value, tmp)
        elif kind == "xgboost":
            booster = value.get_booster() if hasattr(value, "get_booster") else value
            booster.save_model(str(tmp.with_suffix(".ubj")))
            tmp.with_suffix(".ubj").replace(tmp)
        elif kind == "lightgbm":  # its text model: trees and parameters, nothing to execute
            booster = value.booster_ if hasattr(value, "booster_") else value
            tmp.write_text(booster.model_to_string())
        else:
            tmp.write_text(json.dumps(value, sort_keys=True))


def _read(kind: str, path: Path):
    if kind == "torch":
        return torch.load(path, map_location="cpu", weights_only=True)
    if kind == "xgboost":
        import xgboost
        booster = xgboost.Booster()
        booster.load_model(str(path))
        return booster
    if kind == "lightgbm":
        import lightgbm
        return lightgbm.Booster(model_str=path.read_text())
    return json.loads(path.read_text())


# ---- the cache ---------------------------------------------------------------------
@dataclass
class Cache:
    """Entries under ``root``; also searches ``<input root>/**/cache`` when missing.

    Args:
        root: the cache folder in the working dir.
        force: recompute every entry and overwrite it (the ``force_retrain`` parameter).
    """
    root: Path
    force: bool = False
    events: list = field(default_factory=list)

    def __post_init__(self):
        self.root = Path(self.root)

    def _inputs(self, name: str, k: str) -> list[Path]:
        return [p for p in env.find_inputs(f"cache/{name}/{k}") if (p / "meta.json").exists()]

    def _load(self, entry: Path):
        meta = json.loads((entry / "meta.json").read_text())
        payload = entry / _FILES[meta["kind"]]
        digest = atomic.sha256_file(payload)
        if digest != meta["sha256"]:
            raise ValueError(f"sha256 mismatch for {payload} (corrupted or truncated)")
        return _read(meta["kind"], payload), meta

    def has(self, name: str, config: dict, *, data=None, code=None) -> bool:
        """Is there an entry for (config, data, code), here or in the inputs (not verified)?
        False under ``force``: everything is recomputed."""
        k = key(config, data, code)
        return not self.force and ((self.root / name / k / "meta.json").exists() or bool(self._inputs(name, k)))

    def lookup(self, name: str, k: str):
        """(value, meta, where) of a usable entry, else None; corrupt ones are reported."""
        local = self.root / name / k
        for entry in [local, *self._inputs(name, k)]:
            if not (entry / "meta.json").exists():
                continue
            try:
                value, meta = self._load(entry)
            except Exception as err:  # noqa: BLE001 - corrupt means recompute
                warnings.warn(f"cache entry {entry} is unusable ({err}); recomputing",
                              CacheWarning, stacklevel=3)
                continue
            if entry != local:  # carry it into this version's output
                shutil.copytree(entry, local, dirs_exist_ok=True)
            return value, meta, entry
        return None

    def store(self, name: str, k: str, value, seconds: float, config: dict) -> Path:
        kind = _kind_of(value)
        entry = self.root / name / k
        payload = entry / _FILES[kind]
        (entry / "meta.json").unlink(missing_ok=True)  # never pair old meta with new value
        _write(value, kind, payload)
        atomic.write_json(entry / "meta.json", {
            "name": name, "key": k, "kind": kind, "sha256": atomic.sha256_file(payload),
            "seconds": round(seconds, 3), "created": time.time(), "config": config})
        return entry

    def get(self, name: str, config: dict, fn: Callable, *, data=None, code=None):
        """The cached result of ``fn()`` for (config, data, code), computing it on a miss."""
        k = key(config, data, code)
        found = None if self.force else self.lookup(name, k)
        if found is not None:
            value, meta, where = found
            self.events.append({"name": name, "key": k, "hit": True, "from": str(where),
                                "seconds_saved": meta["seconds"]})
            print(f"kagglekit cache: {name} hit ({where}), skipped {meta['seconds']:.1f}s of work")
            return value
        started = time.monotonic()
        value = fn()
        seconds = time.monotonic() - started
        entry = self.store(name, k, value, seconds, config)
        self.events.append({"name": name, "key": k, "hit": False, "forced": self.force,
                            "seconds": round(seconds, 3)})
        print(f"kagglekit cache: {name} {'recomputed (forced)' if self.force else 'miss'}, "
              f"computed in {seconds:.1f}s and stored")
        kind = _kind_of(value)  # boosters come back as loaded from disk, hit or miss alike
        return _read(kind, entry / _FILES[kind]) if kind in ("xgboost", "lightgbm") else value

    def work(self, prefix: str) -> dict:
        """The entries named ``prefix...`` this session: their seconds of work (computed, or
        saved by a hit) and whether all were hits (None each when there is none)."""
        mine = [e for e in self.events if e["name"].startswith(prefix)]
        seconds = sum(e.get("seconds", e.get("seconds_saved", 0)) for e in mine)
        return {"train_s": seconds if mine else None,
                "cached": all(e["hit"] for e in mine) if mine else None}

    def stats(self) -> dict:
        """Hits, misses and time saved, for metrics.json."""
        hits = [e for e in self.events if e["hit"]]
        return {"hits": len(hits), "misses": len(self.events) - len(hits),
                "seconds_saved": round(sum(e["seconds_saved"] for e in hits), 3),
                "entries": self.events}
