"""Checkpoints on disk: a step's payload and its sidecar, found by scanning a folder.

A payload without a sidecar is an interrupted save and is not found; an unreadable sidecar is an
unusable checkpoint and is not found either.
"""
from __future__ import annotations

import json
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import torch

_STEP_FILE = re.compile(r"^step-(\d{8,})(-[a-z0-9]+)?\.json$")  # -r1: a rank's own save


@dataclass(frozen=True)
class Found:
    """A checkpoint on disk, described by its sidecar."""
    path: Path
    meta: dict

    @property
    def step(self) -> int:
        return int(self.meta["step"])

    @property
    def sidecar(self) -> Path:
        return self.path.with_suffix(".json")


def versions() -> dict:
    from ..machine.version import __version__
    return {"torch": torch.__version__, "kagglekit": __version__, "python": platform.python_version()}


def scan(folder: Path) -> list[Found]:
    found: list[Found] = []
    if not folder.is_dir():
        return found
    for sidecar in folder.iterdir():
        if not _STEP_FILE.match(sidecar.name):
            continue
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, ValueError):
            continue  # an unreadable sidecar is an unusable checkpoint
        payload = sidecar.with_suffix(".pt")
        if payload.exists():
            found.append(Found(payload, meta))
    return found


