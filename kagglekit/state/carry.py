"""Finished trainings carried from the previous kernel version's output into this one's.

A fit carries the checkpoint it resumes from (``CheckpointManager._carry_over``), but a unit
skipped whole (a cached fold: its predictions are in the cache, no fit runs) carries nothing:
its checkpoints would live only in the output of the version that trained it, and two versions
later (or in Kaggle's scoring rerun, which mounts what the submitted version mounted) the
adapters the rerun predicts with would be gone. ``carry_finished`` copies the newest finished
checkpoint of each identity found in the inputs into this run's folder, once.
"""
from __future__ import annotations

import shutil

from . import atomic
from .checkpoint import CheckpointManager, _scan, _writer


def carry_finished(manager: CheckpointManager) -> int:
    """Copy, per identity under ``manager``'s root in the inputs, its newest finished checkpoint
    (payload, then sidecar, each atomically) where this run's output lacks one; how many."""
    if not _writer():
        return 0
    copied = 0
    for mirror in manager.search_roots:
        for folder in sorted(p for p in mirror.iterdir() if p.is_dir()):
            finals = [f for f in _scan(folder) if f.meta.get("final")]
            here = manager.root / folder.name
            if not finals or any(f.meta.get("final") for f in _scan(here)):
                continue
            newest = max(finals, key=lambda f: f.step)
            here.mkdir(parents=True, exist_ok=True)
            with atomic.atomic_path(here / newest.path.name) as tmp:
                shutil.copyfile(newest.path, tmp)
            atomic.write_json(here / newest.path.with_suffix(".json").name, newest.meta)
            copied += 1
    return copied
