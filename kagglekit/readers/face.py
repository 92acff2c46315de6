"""A room's face: ``kk.images`` is the images room, and what a notebook calls on it
(``kk.images.read_competition``) is its reader's, imported on first use, so that importing one
module of a room (``kagglekit.text.textsets``) never pays for its reader's libraries
(``text/classifier.py`` imports transformers). Each room's ``__init__`` also star-imports its
reader under ``TYPE_CHECKING``: mypy and editors see the same names with their types.
"""
from __future__ import annotations

import importlib
import importlib.util


def forward(package: str, reader: str):
    """The ``__getattr__`` of ``package``: its modules by name, then the names of its ``reader``."""
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        module = importlib.import_module(f"{package}.{reader}")
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r} (nor has its reader "
                                 f"{package}.{reader})") from None
    return __getattr__
