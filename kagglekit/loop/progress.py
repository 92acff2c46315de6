"""Progress output that fits where it runs.

- A person watching (an interactive notebook, a terminal): a live tqdm bar that
  updates in place (the notebook widget where ipywidgets is installed).
- Nobody watching (a Kaggle "Save & Run All" commit, papermill, CI): a line when
  an epoch ends (at most one every ``min_gap_s``) and at least one every
  ``every_s`` seconds, with the figures that matter; never one line per refresh,
  which an executed notebook would keep as dozens of lines per training.
- Inside ``quiet()`` (an Optuna trial, which reports one line of its own): nothing.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time

_quiet = contextvars.ContextVar("kagglekit_quiet", default=False)


def _papermill_injected() -> bool:
    """papermill's injected parameters cell is in the history: a batch run of a notebook."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    history = shell.user_ns.get("In", []) if shell is not None else []
    from ..machine.display import INJECTED_MARK
    return any(str(cell).lstrip().startswith(INJECTED_MARK) for cell in history)


def watched() -> bool:
    """Is a person watching this run live?"""
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE") == "Batch" or os.environ.get("CI") \
            or os.environ.get("KAGGLEKIT_BATCH"):
        return False
    from ..machine.display import in_notebook
    if in_notebook():
        return not _papermill_injected()
    return sys.stderr.isatty()


@contextlib.contextmanager
def quiet():
    """No progress output from the code inside (it reports by other means)."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


class _Lines:
    """tqdm's small interface, printing a line per epoch or per ``every_s`` seconds."""

    def __init__(self, total: int | None, desc: str, every_s: float, min_gap_s: float,
                 initial: int = 0):
        self.total, self.desc, self.every_s, self.min_gap_s = total, desc, every_s, min_gap_s
        self.n, self.initial, self.postfix = initial, initial, ""  # initial: done before this session
        self.started = self.last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self._print(now)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        """New figures (an epoch ended): a line, unless one was printed moments ago."""
        self.postfix = text
        now = time.monotonic()
        if refresh and now - self.last >= self.min_gap_s:
            self._print(now)

    def _print(self, now: float) -> None:
        self.last = now
        done = self.n - self.initial
        rate = f", {done / max(now - self.started, 1e-9):.1f} steps/s" if done else ""
        of = f"/{self.total}" if self.total else ""
        print(f"{self.desc}: {self.n}{of} steps{rate} {self.postfix}".rstrip(), flush=True)

    def close(self) -> None:
        self._print(time.monotonic())


class _Silent:
    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, text: str, refresh: bool = True) -> None: ...
    def close(self) -> None: ...


def bar(total: int | None, desc: str, *, enabled: bool = True, every_s: float = 60.0,
        min_gap_s: float = 10.0, initial: int = 0):
    """A progress object with ``update``, ``set_postfix_str`` and ``close``; ``initial``:
    steps done before (a resumed run), counted in the position but not in the rate."""
    if not enabled or _quiet.get():
        return _Silent()
    if not watched():
        return _Lines(total, desc, every_s, min_gap_s, initial)
    try:
        import ipywidgets  # noqa: F401  (without it tqdm.auto warns and falls back to text)
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm
    return tqdm(total=total, desc=desc, dynamic_ncols=True, mininterval=0.5, file=sys.stdout,
                initial=initial)
