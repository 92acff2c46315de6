"""A run's scratch: files it needs but never keeps (a study's savepoints), under /kaggle/temp on
Kaggle (larger than the saved output, not saved), else the system's temp folder.

A session's scratch goes when the notebook's process exits. A kernel can die without its exit
handlers: papermill's kernel manager SIGTERMs one still alive 2.5 s after the last cell, and
ipykernel 7 first waits for its children (multiprocessing's resource tracker ignores SIGTERM).
That scratch goes with the next run's, so no run fills a machine that keeps /tmp (a CI runner,
a laptop).
"""
from __future__ import annotations

import atexit
import os
import shutil
from pathlib import Path

from ..machine.signals import alive

PREFIX = "kagglekit-scratch-"  # then the notebook process's pid: whose scratch it is


def folder(root: Path, pid: int, session: str, name: str) -> Path:
    """``<root>/kagglekit-scratch-<pid>-<session>/<name>``, made; the first of a session clears
    the dead processes' scratch and, in the notebook's own process, removes its own at exit."""
    own = root / f"{PREFIX}{pid}-{session}"
    if not own.exists():
        remove_dead(root)
        if os.getpid() == pid:
            atexit.register(shutil.rmtree, own, ignore_errors=True)
    path = own / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_dead(root: Path) -> None:
    """The scratch folders under ``root`` whose notebook process no longer runs."""
    for found in root.glob(f"{PREFIX}*"):
        pid = found.name[len(PREFIX):].split("-")[0]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(found, ignore_errors=True)
