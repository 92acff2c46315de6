"""Imported by the fork server alone, last of what it preloads: the rest of what its children
would each import again, then the garbage collector told to leave it all alone.

The server imports the heavy libraries a notebook imported (forkserver.PRELOAD and
ALSO_WHEN_IMPORTED) but not their submodules loaded lazily: transformers builds its models'
modules on first use, so every rank of a text notebook imported ``modeling_auto`` (and
accelerate) again: 0.6 s of the 0.95 s a rank cost on CPU (py-spy over a sandbox version).
``forkserver.warm`` names the modules to import here in KAGGLEKIT_SERVER_IMPORTS, set only
while the server starts (imported anywhere else, this module does nothing): the submodules of
those libraries and of the kit that the notebook has imported, and each library's own lazily
built ones (``forkserver.LAZY``).

Then ``gc.freeze()``: every object the server made moves to the permanent generation, which a
child's collections never walk. A rank's ``gc.collect()`` at its end (launcher._leave_group)
walked every object of torch and transformers, 0.2 s per rank, and wrote to each page it
walked (copy-on-write: the child's memory grows by what the server holds)."""
from __future__ import annotations

import gc
import importlib
import os

from .forkserver import SERVER_IMPORTS


def _import_each(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a speed-up only: the child imports what it needs itself
            pass


if SERVER_IMPORTS in os.environ:
    _import_each([n for n in os.environ[SERVER_IMPORTS].split(",") if n])
    gc.freeze()
