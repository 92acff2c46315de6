"""Local run folders that keep history: one per notebook configuration.

``runs/<notebook>/<label>-<hash>/`` holds one configuration's executed notebook,
metrics.json, plots, checkpoints and ``status.json``. The label is readable (the
parameters that differ from the notebook's defaults, or "defaults"); the hash is of
the whole configuration. Running the same configuration again resumes or skips in
its own folder; another configuration never deletes or overwrites it; a failed run
is recorded as failed in its own folder. ``runs/<notebook>/latest`` points at the
last successful run.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from pathlib import Path

from ..machine.signals import alive
from ..state import atomic

# Parameters that change how a run is executed, not what it computes: a run with other
# values of these is the same run continued, in the same folder. A notebook's run-control
# parameters (``# [run]`` in its parameters cell: epochs, steps...) are too: more epochs
# continue the run in its folder. Inference settings are neutral as well: another test set
# (test_dir) or window overlap, flips or threshold reuses the finished training of this
# folder and predicts again (submission.zip then holds the new test set; the earlier masks
# stay in predictions/).
NEUTRAL = frozenset({"force_retrain", "time_budget_s", "save_every_min",
                     "test_dir", "overlap", "flips", "threshold"})
LATEST = "latest"


def folder_name(defaults: dict, overrides: dict, run_control=frozenset()) -> str:
    """``<label>-<8 hex>`` for the notebook's defaults updated with ``overrides`` (neutral and
    ``run_control`` parameters left out: they continue the same run)."""
    neutral = NEUTRAL | set(run_control)
    config = {k: v for k, v in {**defaults, **overrides}.items() if k not in neutral}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:8]
    changed = {k: v for k, v in sorted(overrides.items())
               if k not in neutral and defaults.get(k, object()) != v}
    label = ",".join(f"{k}={v}" for k, v in changed.items()) or "defaults"
    label = re.sub(r"[^A-Za-z0-9_.=,+-]+", "_", label)[:48].strip("_")
    return f"{label}-{digest}"


def write_status(folder: Path, status: str, **facts) -> None:
    """``status.json``: running, ok or failed, with the times and what went wrong."""
    path = folder / "status.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    atomic.write_json(path, {**previous, "status": status, "time": time.time(), **facts})


def set_aside_failure(folder: Path, stem: str) -> Path | None:
    """After a good run: an earlier attempt's ``error.log`` and ``<stem>.failed.ipynb`` moved into
    ``failed-before/<when it failed>/``, kept, so the folder's own files are all this run's (a
    stale failed notebook beside status "ok" reads as this run's failure)."""
    stale = [p for p in (folder / "error.log", folder / f"{stem}.failed.ipynb") if p.exists()]
    if not stale:
        return None
    when = time.strftime("%Y%m%d-%H%M%S", time.localtime(max(p.stat().st_mtime for p in stale)))
    kept = folder / "failed-before" / when
    kept.mkdir(parents=True, exist_ok=True)
    for path in stale:
        os.replace(path, kept / path.name)
    return kept


def shown_status(status: dict) -> str:
    """The status a person should see: a "running" run whose process is gone was killed (SIGKILL,
    a closed terminal, a machine that went down) and says so, not "running" forever."""
    said = status.get("status", "?")
    pid, host = status.get("pid"), status.get("host")
    if said == "running" and pid and host == socket.gethostname() and not alive(int(pid)):
        return "killed"
    return said


def mark_latest(folder: Path) -> None:
    """Point ``<notebook>/latest`` at ``folder`` (a relative link, replaced atomically)."""
    link = folder.parent / LATEST
    tmp = folder.parent / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder.name)
    os.replace(tmp, link)


def listing(root: Path) -> list[dict]:
    """Every run under ``root``: notebook, folder, status, when, headline results."""
    rows = []
    for status_file in sorted(Path(root).glob("*/*/status.json")):
        folder = status_file.parent
        if folder.is_symlink():
            continue
        status = json.loads(status_file.read_text())
        metrics_file = folder / "metrics.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
        rows.append({"notebook": folder.parent.name, "run": folder.name,
                     "status": shown_status(status), "time": status.get("time", 0),
                     "wall_s": metrics.get("wall_seconds"),
                     "latest": (folder.parent / LATEST).resolve() == folder.resolve(),
                     "headline": headline_text(metrics.get("summary") or [])})
    return sorted(rows, key=lambda r: (r["notebook"], -r["time"]))


def headline_text(summary: list[dict]) -> str:
    """"test PR-AUC 0.812 vs MLP 0.173 (pass)" for each headline of a run; a line without a value
    (a figure not measurable here, folds still to train) is its words alone."""
    parts = []
    for h in summary:
        value = h.get("value")
        shown = "" if value is None else f" {value:.4g}" if isinstance(value, float) else f" {value}"
        vs = f" vs {h['vs']} {h['baseline']:.4g}" if isinstance(h.get("baseline"), float) else ""
        mark = {True: " (pass)", False: " (FAIL)", None: ""}.get(h.get("passed"), "")
        parts.append(f"{h['result']}{shown}{vs}{mark}")
    return "; ".join(parts)


def fetched_versions(kernel_folder: Path) -> list[Path]:
    """``make output``'s ``v<N>`` folders of one kernel (``runs/kaggle/<slug>``) that hold a
    metrics.json, oldest version first."""
    found = [p.parent for p in Path(kernel_folder).glob("v*/metrics.json") if p.parent.name[1:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[1:]))
