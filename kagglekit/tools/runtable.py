"""``make runs``: every local run and every downloaded Kaggle version in one table, and as CSV.

What competitors keep by hand: each experiment's local CV, its Kaggle version, its public score
and what its parameters change. Local rows come from ``runs/<notebook>/<config>/`` (``runfolders``),
Kaggle rows from ``runs/kaggle/<slug>/v<N>/`` (``make output``: metrics.json, and ``kaggle.json``
with the version's status) and ``runs/kaggle/<slug>/scores.json`` (``make score``: the public
score per version). Each row's ``params`` names the parameters that differ from the notebook's
defaults (a local run's folder label; a Kaggle run's, computed the same way from its config).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from . import runfolders

COLUMNS = ("notebook", "run", "status", "time", "cv", "public", "params", "wall_s", "latest")
ON_SCREEN = ("latest", "notebook", "run", "status", "time", "wall_s", "public", "params", "cv")  # the long one last


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _notebooks_by_slug(metadata_dir: Path) -> dict[str, str]:
    return {json.loads(p.read_text())["slug"]: p.stem for p in sorted(metadata_dir.glob("*.json"))}


def _params(notebook: str, config: dict, notebooks_dir: Path) -> str:
    from ..run.params import run_control
    from .notebook_runner import declared_parameters, parameters_source
    path = notebooks_dir / f"{notebook}.ipynb"
    if not path.exists():
        return ""
    defaults = declared_parameters(path)
    changed = {k: v for k, v in config.items() if k in defaults and defaults[k] != v}
    # labelled as a local run's folder: run control (# [run]: epochs...) continues a run, it is no experiment
    return runfolders.folder_name(defaults, changed, run_control(parameters_source(path))).rsplit("-", 1)[0]


def kaggle_rows(root: Path, metadata_dir: Path = Path("kernel-metadata"),
                notebooks_dir: Path = Path("notebooks")) -> list[dict]:
    """A row per downloaded Kaggle version: its status, CV headline, public score, parameters."""
    names = _notebooks_by_slug(metadata_dir) if metadata_dir.is_dir() else {}
    rows = []
    for metrics_file in sorted((root / "kaggle").glob("*/v*/metrics.json")):
        folder, slug = metrics_file.parent, metrics_file.parent.parent.name
        metrics, fetched = _json(metrics_file), _json(metrics_file.parent / "kaggle.json")
        score = _json(folder.parent / "scores.json").get(folder.name.lstrip("v"), {})
        notebook = json.loads((metadata_dir / f"{names[slug]}.json").read_text()).get("notebook", names[slug]) \
            if slug in names else slug
        rows.append({"notebook": notebook, "run": f"kaggle {folder.name}", "status": fetched.get("status", "?"),
                     "time": fetched.get("time", metrics_file.stat().st_mtime),
                     "cv": runfolders.headline_text(metrics.get("summary") or []),
                     "public": score.get("public", ""), "wall_s": metrics.get("wall_seconds"),
                     "params": _params(notebook, metrics.get("config", {}), notebooks_dir), "latest": False})
    return rows


def table(root: Path) -> list[dict]:
    """Local runs and Kaggle versions, newest first per notebook; written to ``root/runs.csv``."""
    local = [{**r, "cv": r.pop("headline"), "public": "", "params": r["run"].rsplit("-", 1)[0]}
             for r in runfolders.listing(root)]
    rows = sorted(local + kaggle_rows(root), key=lambda r: (r["notebook"], -r["time"]))
    if rows:
        from ..state import atomic
        with atomic.atomic_path(root / "runs.csv") as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
    return rows


def text(root: Path) -> str:
    """The table as ``make runs`` prints it (times readable, the latest local run starred)."""
    import datetime

    from ..machine.display import text_table
    rows = table(root)
    if not rows:
        return ""
    for r in rows:
        r["time"] = datetime.datetime.fromtimestamp(r["time"]).strftime("%Y-%m-%d %H:%M")
        r["latest"] = "*" if r["latest"] else ""
    return f"{text_table([{k: r.get(k, '') for k in ON_SCREEN} for r in rows])}\n(also {root / 'runs.csv'}, uncut)"
