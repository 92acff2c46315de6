"""The real ``kaggle`` CLI, with its output checked (its exit codes lie).

``kernels push`` prints "Kernel push error: ..." and exits 0 when the server
refuses; ``kernels status`` exits 0 even for ERROR. Each wrapper parses what the
CLI printed and raises KaggleError with the message instead.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DONE = {"COMPLETE", "ERROR", "CANCEL_ACKNOWLEDGED"}


class KaggleError(RuntimeError):
    """The kaggle CLI or the server reported a failure."""


def executable() -> str:
    beside = Path(sys.executable).parent / "kaggle"  # the venv's pinned CLI
    return str(beside) if beside.exists() else (shutil.which("kaggle") or "kaggle")


def _run(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run([executable(), *args], capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise KaggleError(f"`kaggle {' '.join(args[:2])}` failed (exit {proc.returncode}):\n"
                          f"{out.strip()[-2000:]}")
    return out


@dataclass
class Pushed:
    version: int | None
    url: str


def push(folder: Path, accelerator: str = "NvidiaTeslaT4") -> Pushed:
    out = _run("kernels", "push", "-p", str(folder), "--accelerator", accelerator)
    refused = re.search(r"Kernel push error: (.*)", out)
    if refused:
        raise KaggleError(f"Kaggle refused the push of {folder}: {refused.group(1).strip()}")
    rejected = re.findall(r"The following are not valid (\w+ ?\w*)[^:]*: (.*)", out)
    if rejected:
        raise KaggleError("Kaggle rejected part of the metadata: " +
                          "; ".join(f"{what}: {items}" for what, items in rejected))
    done = re.search(r"Kernel version (\d+)? ?successfully pushed\.\s+Please check progress at (\S+)",
                     out)
    if not done:
        raise KaggleError(f"unexpected output from `kaggle kernels push`:\n{out.strip()[-2000:]}")
    version = int(done.group(1)) if done.group(1) else None
    (Path(folder) / "pushed.json").write_text(json.dumps({"version": version, "url": done.group(2)}))
    return Pushed(version, done.group(2))


@dataclass
class Status:
    state: str  # QUEUED, RUNNING, COMPLETE, ERROR, ...
    failure: str = ""


def parse_status(out: str) -> Status:
    found = re.search(r'has status "(?:KernelWorkerStatus\.)?([A-Za-z_]+)"', out)
    if not found:
        raise KaggleError(f"unexpected output from `kaggle kernels status`:\n{out.strip()[-1000:]}")
    failure = re.search(r'Failure message: "(.*)"', out, re.S)
    return Status(found.group(1).upper(), failure.group(1) if failure else "")


def status(kernel: str) -> Status:
    return parse_status(_run("kernels", "status", kernel))


def wait(kernel: str, timeout_s: float = 12 * 3600, first_s: float = 10, max_s: float = 300,
         sleep=time.sleep) -> Status:
    """Poll with exponential back-off until the run is done or ``timeout_s`` passes."""
    deadline, delay = time.monotonic() + timeout_s, first_s
    while True:
        current = status(kernel)
        print(f"{kernel}: {current.state}", flush=True)
        if current.state in DONE or time.monotonic() + delay > deadline:
            return current
        sleep(delay)
        delay = min(max_s, delay * 2)


def output(kernel: str, dest: Path) -> list[Path]:
    """Download every output file (subfolders kept) and the log into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    _run("kernels", "output", kernel, "-p", str(dest), "--force", timeout=3600)
    return sorted(p for p in dest.rglob("*") if p.is_file())
