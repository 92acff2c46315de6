"""Progress output: a tqdm bar when a person watches, periodic log lines otherwise.

A Kaggle "Save & Run All" (Batch) session or a CI log has no one watching a bar
redraw; there a line every ``every_s`` seconds is what reads well afterwards.
"""
from __future__ import annotations

import os
import sys
import time


def interactive() -> bool:
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE") == "Batch" or os.environ.get("CI"):
        return False
    try:
        from IPython import get_ipython
        if get_ipython() is not None and hasattr(get_ipython(), "kernel"):
            return True
    except ImportError:
        pass
    return sys.stderr.isatty()


class _Lines:
    """tqdm's small interface, printing one line every ``every_s`` seconds."""

    def __init__(self, total: int | None, desc: str, every_s: float):
        self.total, self.desc, self.every_s = total, desc, every_s
        self.n, self.postfix = 0, ""
        self.started = self.last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self._print(now)

    def set_postfix_str(self, text: str, refresh: bool = False) -> None:
        self.postfix = text

    def _print(self, now: float) -> None:
        rate = self.n / max(now - self.started, 1e-9)
        of = f"/{self.total}" if self.total else ""
        print(f"{self.desc}: {self.n}{of} steps, {rate:.1f} steps/s {self.postfix}", flush=True)

    def close(self) -> None:
        self._print(time.monotonic())


class _Silent:
    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, text: str, refresh: bool = False) -> None: ...
    def close(self) -> None: ...


def bar(total: int | None, desc: str, *, enabled: bool = True, every_s: float = 30.0):
    """A progress object with ``update``, ``set_postfix_str`` and ``close``."""
    if not enabled:
        return _Silent()
    if not interactive():
        return _Lines(total, desc, every_s)
    try:
        import ipywidgets  # noqa: F401  (tqdm.auto needs it for the notebook widget)
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm
    return tqdm(total=total, desc=desc, dynamic_ncols=True, mininterval=0.5, file=sys.stdout)
