"""Execute notebooks locally with papermill, each configuration into its own folder.

``runs/<name>/<label>-<hash>/`` (see ``runfolders``) receives the executed notebook,
``status.json``, and (written by the notebook through the kit) metrics.json, plots and
checkpoints. Parameters are checked against the notebook's parameters cell before a
kernel starts; a failed run keeps its traceback in ``error.log`` and never replaces
the executed notebook of a good run.
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from ..run import params as params_mod, paths
from ..state import atomic
from . import borrow, kernelsockets, runfolders
from .publish.data import data_root


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


def parameters_source(notebook: Path | str) -> str:
    """The source of the notebook's cell tagged "parameters"."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise params_mod.ParameterError(f"{notebook} has {len(tagged)} cells tagged 'parameters' "
                                        "(papermill needs exactly one)")
    source = tagged[0]["source"]
    return "".join(source) if isinstance(source, list) else source


def declared_parameters(notebook: Path | str) -> dict:
    """``{name: default}`` of the notebook's cell tagged "parameters"."""
    return params_mod.assignments(parameters_source(notebook))


def check_parameters(notebook: Path | str, overrides: dict) -> dict:
    """The notebook's defaults; what its parameters cell refuses of ``overrides`` (an unknown or
    mistyped name, a value outside its declared choices, members or range, an empty required
    one: ``contract``) and a path that names nothing here or under data/ raise ParameterError
    ("did you mean ...") before any kernel starts."""
    source = parameters_source(notebook)
    params_mod.check(source, overrides)
    roots = [data_root(), *(Path(p) for p in os.environ.get("KAGGLEKIT_INPUT", "").split(os.pathsep) if p)]
    paths.check(source, overrides, [r for r in roots if r.is_dir()])
    return params_mod.assignments(source)


def run_folder(notebook: Path | str, overrides: dict, output_root: Path | str = "runs") -> Path:
    """Where this configuration of ``notebook`` runs: ``<root>/<name>/<label>-<hash>``."""
    declared = check_parameters(notebook, overrides)
    run_control = params_mod.run_control(parameters_source(notebook))
    return Path(output_root) / Path(notebook).stem / runfolders.folder_name(declared, overrides,
                                                                          run_control)


def run_notebook(notebook: Path | str, params: dict | None = None, *,
                 output_root: Path | str = "runs", output_dir: Path | str | None = None,
                 timeout_s: int | None = None, progress: bool = True) -> Path:
    """Execute ``notebook`` with ``params``; returns its output folder.

    Without ``output_dir`` the folder is this configuration's run folder under
    ``output_root`` (history kept, ``latest`` updated on success). Raises
    ParameterError before starting a kernel, and papermill.PapermillExecutionError
    (with the failing cell's traceback, also in ``error.log``) when a cell fails.
    """
    notebook, params = Path(notebook), dict(params or {})
    history = output_dir is None  # either way the parameters are checked before any kernel
    out = run_folder(notebook, params, output_root) if output_dir is None else Path(output_dir)
    if not history:
        check_parameters(notebook, params)
    out.mkdir(parents=True, exist_ok=True)
    runfolders.write_status(out, "running", parameters=params, started=time.time(), error=None,
                            pid=os.getpid(), host=socket.gethostname())
    try:
        with _terminate_as_exit():
            _execute(notebook, params, out, timeout_s, progress)
    except BaseException as err:
        atomic.write_bytes(out / "error.log", "".join(traceback.format_exception(err)).encode())
        killed = isinstance(err, Terminated)
        runfolders.write_status(out, "killed" if killed else "failed",
                                error="killed by SIGTERM" if killed else one_line(err))
        raise
    runfolders.write_status(out, "ok")
    kept = runfolders.set_aside_failure(out, notebook.stem)
    if kept:
        print(f"  an earlier attempt's failure (error.log, its notebook) moved to {kept}", flush=True)
    if history:
        runfolders.mark_latest(out)
    return out


class Terminated(SystemExit):
    """The run was sent SIGTERM (a closed terminal, a CI timeout, `kill`)."""


@contextlib.contextmanager
def _terminate_as_exit():
    """SIGTERM while a notebook runs: raised as ``Terminated`` in this process, so papermill
    shuts its kernel down and the run's status says "killed" (SIGKILL leaves no chance: the
    status's pid, gone, says it to ``make runs``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated(128 + signum)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _execute(notebook: Path, params: dict, out: Path, timeout_s, progress: bool) -> None:
    """papermill into a side file: only a run that finished replaces ``<name>.ipynb``."""
    import papermill

    _venv_kernel_env()
    running, final = out / f".{notebook.stem}.running.ipynb", out / notebook.name
    # The kernel inherits these: where outputs go, that nobody watches (progress as lines), and
    # data/ among the inputs, as /kaggle/input is on Kaggle (`make data` fills it: a data_dir
    # naming a competition's or dataset's slug finds data/<slug>).
    inputs = [p for p in os.environ.get("KAGGLEKIT_INPUT", "").split(os.pathsep) if p]
    notices = out / "notices.txt"  # what the kit decided about the user's input (display.notice): shown here too
    notices.unlink(missing_ok=True)
    overrides = {"KAGGLEKIT_OUTPUT": str(out.resolve()),
                 "KAGGLEKIT_BATCH": os.environ.get("KAGGLEKIT_BATCH", "1"),
                 "KAGGLEKIT_INPUT": os.pathsep.join([*inputs, str(data_root().resolve())]),
                 "KAGGLEKIT_NOTICES": str(notices.resolve())}
    previous = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = borrow.filled_copy(notebook, Path(tmp))  # another pipeline's model cells, if any
            papermill.execute_notebook(
                str(source), str(running), parameters=params, kernel_name="python3",
                cwd=str(Path.cwd()), progress_bar=progress, execution_timeout=timeout_s,
                log_output=False, kernel_manager_class=kernelsockets.manager_class(Path(tmp)))  # no port to race
        os.replace(running, final)
    except BaseException:
        if running.exists():
            os.replace(running, out / f"{notebook.stem}.failed.ipynb")
        raise
    finally:
        for line in notices.read_text().splitlines() if notices.exists() else ():
            print(f"  {notebook.stem} said: {line}", flush=True)
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def one_line(err: BaseException) -> str:
    """The error a person needs: a failing cell's exception, not papermill's wrapper."""
    name, value = getattr(err, "ename", None), getattr(err, "evalue", None)
    if name:
        return f"{name}: {value}"
    return f"{type(err).__name__}: {err}".splitlines()[0]
