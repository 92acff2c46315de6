"""Execute notebooks locally with papermill, each into its own output folder.

``runs/<name>/`` receives the executed notebook, and (written by the notebook
through the kit) metrics.json, plots and checkpoints.
"""
from __future__ import annotations

import ast
import os
import sys
from pathlib import Path


def parse_overrides(items: list[str]) -> dict:
    """``["epochs=3", "data_dir=/x"]`` -> ``{"epochs": 3, "data_dir": "/x"}``."""
    params = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"parameter override {item!r} must look like NAME=VALUE")
        try:
            params[name] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            params[name] = raw  # a bare word is a string
    return params


def _venv_kernel_env() -> None:
    """Make papermill's "python3" kernel the one registered in this environment.

    ``make`` registers it under ``<venv>/share/jupyter``; JUPYTER_PATH is searched
    before the user's home, so a stray kernel of the user's cannot take its place.
    """
    share = Path(sys.prefix) / "share" / "jupyter"
    paths = [str(share)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))


def run_notebook(notebook: Path | str, params: dict | None = None, *,
                 output_root: Path | str = "runs", output_dir: Path | str | None = None,
                 timeout_s: int | None = None, progress: bool = True) -> Path:
    """Execute ``notebook`` with ``params``; returns its output folder.

    Raises papermill.PapermillExecutionError (with the failing cell's traceback)
    when a cell fails; the partly executed notebook is still saved.
    """
    import papermill

    notebook = Path(notebook)
    out = Path(output_dir) if output_dir else Path(output_root) / notebook.stem
    out.mkdir(parents=True, exist_ok=True)
    _venv_kernel_env()
    # The kernel inherits these: where outputs go, and that nobody watches (progress as lines).
    overrides = {"KAGGLEKIT_OUTPUT": str(out.resolve()),
                 "KAGGLEKIT_BATCH": os.environ.get("KAGGLEKIT_BATCH", "1")}
    previous = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        papermill.execute_notebook(
            str(notebook), str(out / notebook.name), parameters=params or {},
            kernel_name="python3", cwd=str(Path.cwd()), progress_bar=progress,
            execution_timeout=timeout_s, log_output=False)
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return out
