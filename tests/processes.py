"""Killing a notebook run outright, as Kaggle's session end does: every process under it.

``os.killpg`` on papermill's group is not enough: jupyter_client starts the kernel in a
session of its own (``start_new_session=True``, so that an interrupt reaches the kernel's
group), and the kernel, orphaned, trains on until ipykernel's parent poller notices, up to a
second later. A short run can finish in that second, and a second run started meanwhile
shares its checkpoint folder with a live writer.
"""
from __future__ import annotations

import subprocess

import psutil


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and all its descendants, whatever their session, and wait for them.

    The tree is frozen first (SIGSTOP, repeated until no new process appears: a rank or a
    loader worker started while we walk it is caught on the next pass), then killed: no
    process of it runs a single step after the kill."""
    frozen: dict[int, psutil.Process] = {}
    root = psutil.Process(proc.pid)
    while True:
        try:
            found = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:  # the root died on its own: what it left is frozen already
            found = []
        new = [p for p in found if p.pid not in frozen]
        if not new:
            break
        for p in new:
            frozen[p.pid] = p
            try:
                p.suspend()
            except psutil.NoSuchProcess:
                pass
    for p in frozen.values():
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs([p for p in frozen.values() if p.pid != proc.pid], timeout=60)
