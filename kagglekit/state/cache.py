"""Skip-if-cached results: a rerun whose inputs did not change skips its training.

An entry is named by its unit's key (``keys.key``: the config without run control, a
fingerprint of the data, the code's version). Change any of them and the entry misses; an
entry computed under other run-control values that shape a result (more ``epochs``) is
recomputed in place (its training trains on from its finished checkpoint).

Entries live in ``<working>/cache/<name>/<key>/``: the value in a format that
cannot run code when loaded (torch with ``weights_only=True``, JSON, XGBoost's
own UBJSON model format, LightGBM's own text model format) and ``meta.json`` with
its sha256. On Kaggle a miss in the working dir is looked up in the attached
inputs (the previous kernel version's output) and a hit there is copied over, so
the next version has it too. ``mapped=True`` returns a value of tensors memory-mapped from
this output's file instead of read (``parallel.mapped``: what the ranks of a launch then share).
"""
from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..machine import env
from ..parallel import mapped as mapping
from . import atomic
from .keys import code_version, fingerprint, key, shaping as shaping_of  # noqa: F401 (kk.cache.fingerprint)


class CacheWarning(UserWarning):
    """A cache entry was corrupt and is being recomputed."""


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


def _read(kind: str, path: Path, mapped: bool = False):
    if kind == "torch":  # mapped: memory-mapped from the file, which a launch sends instead of the bytes
        return mapping.load(path) if mapped else torch.load(path, map_location="cpu", weights_only=True)
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

    def _verified(self, entry: Path) -> dict:
        """The entry's meta, once its payload's sha256 is the one it records."""
        meta = json.loads((entry / "meta.json").read_text())
        payload = entry / _FILES[meta["kind"]]
        digest = atomic.sha256_file(payload)
        if digest != meta["sha256"]:
            raise ValueError(f"sha256 mismatch for {payload} (corrupted or truncated)")
        return meta

    def has(self, name: str, k: str, shaping: dict | None = None) -> bool:
        """Is there an entry ``name``/``k`` made under ``shaping``, here or in the inputs (not
        verified)? False under ``force``: everything is recomputed."""
        if self.force:
            return False
        metas = [e / "meta.json" for e in [self.root / name / k, *self._inputs(name, k)]]
        return any(_shaped(m, shaping) for m in metas if m.exists())

    def lookup(self, name: str, k: str, shaping: dict | None = None, mapped: bool = False):
        """(value, meta, where) of a usable entry made under ``shaping``, else None; corrupt
        ones are reported. ``mapped``: its tensors mapped from this output's copy of the file."""
        local = self.root / name / k
        for entry in [local, *self._inputs(name, k)]:
            if not (entry / "meta.json").exists() or not _shaped(entry / "meta.json", shaping):
                continue
            try:
                meta = self._verified(entry)
                if entry != local and mapped:  # mapped from this output's copy, never read whole
                    shutil.copytree(entry, local, dirs_exist_ok=True)
                read_from = local if mapped else entry
                value = _read(meta["kind"], read_from / _FILES[meta["kind"]], mapped)
            except Exception as err:  # noqa: BLE001 - corrupt means recompute
                warnings.warn(f"cache entry {entry} is unusable ({err}); recomputing",
                              CacheWarning, stacklevel=3)
                continue
            if entry != local and not mapped:  # carry it into this version's output
                shutil.copytree(entry, local, dirs_exist_ok=True)
            return value, meta, entry
        return None

    def store(self, name: str, k: str, value, seconds: float, config: dict,
              shaping: dict | None = None) -> Path:
        kind = _kind_of(value)
        entry = self.root / name / k
        payload = entry / _FILES[kind]
        (entry / "meta.json").unlink(missing_ok=True)  # never pair old meta with new value
        _write(value, kind, payload)
        atomic.write_json(entry / "meta.json", {
            "name": name, "key": k, "kind": kind, "sha256": atomic.sha256_file(payload),
            "seconds": round(seconds, 3), "created": time.time(), "config": config,
            "shaping": shaping or {}})
        return entry

    def get(self, name: str, config: dict, fn: Callable, *, data=None, code=None, run_control=()):
        """The cached result of ``fn()`` for (config, data, code), computing it on a miss
        (``run_control``: config keys that are not the result's identity; see ``keys``)."""
        return self.compute(name, key(config, data, code, run_control), fn, config=config,
                            shaping=shaping_of(config, run_control))

    def compute(self, name: str, k: str, fn: Callable, *, config: dict, shaping: dict | None = None,
                mapped: bool = False):
        """Entry ``name``/``k`` made under ``shaping``, else ``fn()`` computed and stored there.
        ``fn`` raising (``Unfinished``: the session's time ran out) stores nothing. ``mapped``:
        a value of tensors comes back memory-mapped from its stored file, hit or miss alike
        (``parallel.mapped``: the process holds it as the page cache does, and a launch sends
        the file to the ranks instead of a copy each)."""
        found = None if self.force else self.lookup(name, k, shaping, mapped)
        if found is not None:
            value, meta, where = found
            self.events.append({"name": name, "key": k, "hit": True, "from": str(where),
                                "seconds_saved": meta["seconds"]})
            print(f"kagglekit cache: {name} hit ({where}), skipped {meta['seconds']:.1f}s of work")
            return value
        started = time.monotonic()
        value = fn()
        seconds = time.monotonic() - started
        entry = self.store(name, k, value, seconds, config, shaping)
        self.events.append({"name": name, "key": k, "hit": False, "forced": self.force,
                            "seconds": round(seconds, 3)})
        print(f"kagglekit cache: {name} {'recomputed (forced)' if self.force else 'miss'}, "
              f"computed in {seconds:.1f}s and stored")
        kind = _kind_of(value)  # boosters, and mapped tensors, come back as loaded from disk, hit or miss alike
        if kind in ("xgboost", "lightgbm") or (mapped and kind == "torch" and not isinstance(value, torch.nn.Module)):
            return _read(kind, entry / _FILES[kind], mapped)
        return value

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


def _shaped(meta_file: Path, shaping: dict | None) -> bool:
    """Was the entry made under these result-shaping run-control values (``epochs``)?"""
    try:
        return json.loads(meta_file.read_text()).get("shaping", {}) == (shaping or {})
    except (OSError, ValueError):
        return True  # unreadable: the load reports it and recomputes
