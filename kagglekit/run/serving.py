"""Inference-server competitions: a ``predict`` that answers every batch within its deadline.

Recent code competitions (Jane Street 2024, Mitsui 2025, NFL Big Data Bowl 2026, AIMO) ship a
``kaggle_evaluation`` package with their data: the notebook wraps its ``predict`` in the
competition's ``InferenceServer`` and calls ``serve()`` in the scoring rerun, which must happen
within the start-up limit (15 minutes after the notebook starts); after the first batch, each
answer must come back within the competition's deadline, or the whole submission fails.

``Served(predict, fallback, deadline_s)`` is what the notebook hands the ``InferenceServer``:
each batch runs ``predict`` in a worker thread; a batch that is not answered ``margin_s``
before its deadline is answered by the notebook's ``fallback`` (the last good prediction, a
cheaper model) with a warning, and the late answer is dropped. The first batch has no deadline
(the competitions allow loading there), as the gateway counts it. ``report()`` gives each
batch's time, who answered it and the start-up time, for metrics.json.
"""
from __future__ import annotations

import concurrent.futures
import os
import statistics
import time
import warnings
from pathlib import Path

STARTUP_LIMIT_S = 15 * 60  # the competitions' limit from the notebook's start to serve()


def process_age_s(stat: Path = Path("/proc/self/stat")) -> float | None:
    """Seconds since this process (the notebook's kernel) started; None without /proc."""
    try:
        ticks = int(stat.read_text().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


class Served:
    """``predict`` with a deadline per batch and a declared fallback."""

    def __init__(self, predict, fallback, deadline_s: float, *, margin_s: float = 0.0,
                 first_exempt: bool = True):
        if deadline_s <= margin_s:
            raise ValueError(f"deadline_s={deadline_s} must exceed margin_s={margin_s}: no time would be left "
                             "to predict")
        self.predict, self.fallback = predict, fallback
        self.deadline_s, self.margin_s, self.first_exempt = deadline_s, margin_s, first_exempt
        self.batches: list[dict] = []
        self.startup_s = process_age_s()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="predict")

    def __call__(self, *batch):
        started = time.perf_counter()
        exempt = self.first_exempt and not self.batches
        future = self._pool.submit(self.predict, *batch)
        try:
            answer = future.result(None if exempt else self.deadline_s - self.margin_s)
            source = "model"
        except concurrent.futures.TimeoutError:
            # The late answer is dropped; the worker stays busy with it, so later batches get a
            # fresh worker rather than queueing behind it.
            self._pool.shutdown(wait=False)
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="predict")
            answer, source = self.fallback(*batch), "fallback"
            warnings.warn(f"batch {len(self.batches)}: predict took more than {self.deadline_s - self.margin_s:.3g} s "
                          f"(deadline {self.deadline_s:g} s); answered by the fallback", stacklevel=2)
        self.batches.append({"batch": len(self.batches), "seconds": round(time.perf_counter() - started, 4),
                             "answered_by": source, "deadline_s": None if exempt else self.deadline_s})
        return answer

    def report(self) -> dict:
        """Batches answered, by whom, their times against the deadline: for metrics.json."""
        timed = [b["seconds"] for b in self.batches if b["deadline_s"] is not None] or [0.0]
        return {"batches": len(self.batches), "fallbacks": sum(b["answered_by"] == "fallback" for b in self.batches),
                "deadline_s": self.deadline_s, "margin_s": self.margin_s,
                "median_s": round(statistics.median(timed), 4), "max_s": round(max(timed), 4),
                "startup_s": None if self.startup_s is None else round(self.startup_s, 1),
                "startup_limit_s": STARTUP_LIMIT_S, "per_batch": self.batches}
