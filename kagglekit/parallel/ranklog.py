"""One log file per launched rank: ``<output>/logs/rank<N>.log``.

On Kaggle a batch run's output of non-zero ranks is hard to find, and a rank killed
by the host leaves no traceback. Each rank's prints, the fit's log lines, warnings and
its traceback go to its own file with a timestamp per line; rank 0 still prints to
the notebook as well. ``kk.start`` names the folder (``KAGGLEKIT_LOG_DIR``), which
forked ranks inherit.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LOG_DIR_ENV = "KAGGLEKIT_LOG_DIR"


class _Tee:
    """A text stream that also writes each complete line, stamped, to a log file."""

    def __init__(self, stream, log, rank: int, echo: bool):
        self.stream, self.log, self.rank, self.echo = stream, log, rank, echo
        self.pending = ""

    def write(self, text: str) -> int:
        if self.echo:
            self.stream.write(text)
        *lines, self.pending = (self.pending + text.replace("\r", "\n")).split("\n")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        for line in lines:
            if line.strip():
                self.log.write(f"{stamp} rank{self.rank} | {line}\n")
        self.log.flush()
        return len(text)

    def flush(self) -> None:
        if self.echo:
            self.stream.flush()
        self.log.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def path(rank: int) -> Path | None:
    folder = os.environ.get(LOG_DIR_ENV)
    return Path(folder) / f"rank{rank}.log" if folder else None


def attach(rank: int) -> None:
    """Send this process's stdout and stderr to its rank's log (rank 0: also on screen)."""
    target = path(rank)
    if target is None:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    log = open(target, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the rank
    sys.stdout = _Tee(sys.stdout, log, rank, echo=rank == 0)
    sys.stderr = _Tee(sys.stderr, log, rank, echo=rank == 0)


def pointer(rank: int) -> str:
    """" (its log: <path>)" for messages about a rank, or "" without log files."""
    target = path(rank)
    return f" (its log: {target})" if target else ""
