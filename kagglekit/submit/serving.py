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
import importlib
import os
import statistics
import sys
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
    """``predict`` with a deadline per batch and a declared fallback; ``started``: when the
    notebook started (``time.time()``), from which the start-up limit counts; by default the
    process's start, which on Kaggle is the notebook's kernel's."""

    def __init__(self, predict, fallback, deadline_s: float, *, margin_s: float = 0.0,
                 first_exempt: bool = True, started: float | None = None):
        if deadline_s <= margin_s:
            raise ValueError(f"deadline_s={deadline_s} must exceed margin_s={margin_s}: no time would be left "
                             "to predict")
        self.predict, self.fallback = predict, fallback
        self.deadline_s, self.margin_s, self.first_exempt = deadline_s, margin_s, first_exempt
        self.batches: list[dict] = []
        self.startup_s = process_age_s() if started is None else time.time() - started
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
                             "rows": len(answer) if hasattr(answer, "__len__") else 1,
                             "answered_by": source, "deadline_s": None if exempt else self.deadline_s})
        return answer

    def report(self) -> dict:
        """Batches answered, by whom, their times against the deadline: for metrics.json."""
        timed = [b["seconds"] for b in self.batches if b["deadline_s"] is not None] or [0.0]
        return {"batches": len(self.batches), "rows": sum(b["rows"] for b in self.batches),
                "fallbacks": sum(b["answered_by"] == "fallback" for b in self.batches),
                "deadline_s": self.deadline_s, "margin_s": self.margin_s,
                "median_s": round(statistics.median(timed), 4), "max_s": round(max(timed), 4),
                "startup_s": None if self.startup_s is None else round(self.startup_s, 1),
                "startup_limit_s": STARTUP_LIMIT_S, "per_batch": self.batches}


def inference_server(folder) -> type | None:
    """The ``InferenceServer`` class of the competition in ``folder`` (its own
    ``kaggle_evaluation/*_inference_server.py``, imported from there), or None when the folder
    is no inference-server competition."""
    if not folder or not (Path(folder) / "kaggle_evaluation").is_dir():
        return None
    servers = sorted((Path(folder) / "kaggle_evaluation").glob("*_inference_server.py"))
    if len(servers) != 1:
        raise FileNotFoundError(f"{folder}/kaggle_evaluation holds {len(servers)} *_inference_server.py files; "
                                "wrap predict in the competition's InferenceServer by hand")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # as the competitions' own notebooks import it
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # /kaggle/input is read-only
    try:
        module = importlib.import_module(f"kaggle_evaluation.{servers[0].stem}")
        base = importlib.import_module("kaggle_evaluation.core.templates").InferenceServer
    finally:
        sys.dont_write_bytecode = writes
    return next(v for v in vars(module).values() if isinstance(v, type) and issubclass(v, base) and v is not base)


def lookup(predictions, keys: list[str], target: str):
    """``predict(batch)`` answering each row of a test batch from precomputed ``predictions``
    (a row per ``keys``: series and time stamp, matched as the file competitions' test.csv is)."""
    import pandas as pd

    from .submission import row_keys
    table = predictions.assign(_key=row_keys(predictions, keys)).set_index("_key")[target]

    def predict(batch):
        answers = table.reindex(row_keys(batch, keys))
        if answers.isna().any():
            raise KeyError(f"the gateway asked for rows the forecast does not cover, e.g. "
                           f"{batch[keys].iloc[int(answers.isna().to_numpy().argmax())].to_dict()}")
        return pd.DataFrame({target: answers.to_numpy()})
    return predict


def serve(folder, predict, fallback, deadline_s: float, *, margin_s: float | None = None,
          data_paths: tuple | None = None) -> dict:
    """``predict`` (``Served``, with ``fallback`` ``margin_s`` before each deadline: by default
    a quarter of it, at most 10 s) behind the competition's own InferenceServer: ``serve()`` in
    Kaggle's scoring rerun, ``run_local_gateway`` on the public test set otherwise; the report."""
    from ..machine.env import competition_rerun
    served = Served(predict, fallback, deadline_s, margin_s=min(10.0, deadline_s / 4) if margin_s is None else margin_s)
    server_class = inference_server(folder)
    if server_class is None:
        raise ValueError(f"{folder}: no kaggle_evaluation/*_inference_server.py: not an inference-server competition")
    server = server_class(served)
    server.serve() if competition_rerun() else server.run_local_gateway(data_paths)
    return served.report()


def submit(predictions, fallback, folder, keys: list[str], target: str, path: Path | str, deadline_s: float) -> dict:
    """``predictions`` (a table of ``keys`` and ``target``) as the competition in ``folder`` takes
    them: behind its inference server when it ships one (``serve``: the gateway asks one batch at
    a time, and ``fallback``, a table alike, answers a batch the model is late for), else written
    to ``path`` in its file format (``submission.write_for``). What was done, for metrics.json."""
    if inference_server(folder) is None:
        from .submission import write_for
        return write_for(predictions, folder, keys, target, path)
    report = serve(folder, lookup(predictions, keys, target), lookup(fallback, keys, target), deadline_s)
    return {**report, "file": Path(path).name, "served": True}
