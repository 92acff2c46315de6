"""``kk.start`` and the run context it returns.

``start`` validates the notebook's parameters, prints the environment report, seeds
everything and picks the output folder; what every fit, launch, search and cache of the
run must agree on is decided there, once, and travels in the ``Run`` it returns:

- the precision for the card (``run.precision``), ``force_retrain``, the session's
  deadline (``time_budget_s``, else Kaggle's session limit, else the competition's cap in a
  scoring rerun), the config, which parameters are run control (``# [run]`` in the
  parameters cell), and the sandbox's work cap;
- it is passed explicitly, the way Lightning Fabric passes its object: ``run.launch(fn,
  ...)`` calls ``fn(run, ...)`` on every rank, ``kk.fit(..., run=run)`` and
  ``kk.tune.optimize(..., run=run)`` take it. No module global carries it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..machine import budget as budget_mod, display, env, inputs
from ..parallel import ranklog, ranks
from ..state.cache import Cache
from ..state.checkpoint import CheckpointManager
from ..state.identity import DEFAULT_RUN_CONTROL
from . import datadir, params, paths, scratch
from .datadir import DataDirError  # noqa: F401 (kk.context.DataDirError)
from .report import Report, save_figure, what_it_did  # noqa: F401 (kk.context.save_figure)

WORK_CAP_ENV = "KAGGLEKIT_WORK_CAP"  # set by `make sandbox`: optimizer steps per fit at most
RERUN_HOURS = 9.0  # a code competition's usual cap on its scoring rerun (the parameter wins)


@dataclass
class Run:
    config: dict
    env: env.EnvReport
    report: Report  # metrics.json, plots, notes, the summary: run.log(...), run.summary(...)
    seed: int = 0
    run_control: frozenset = DEFAULT_RUN_CONTROL  # config keys that are not the run's identity
    force_retrain: bool = False  # every fit starts over, every cache entry is recomputed
    deadline: float | None = None  # unix time the session's work must end by (None: never)
    work_cap: int | None = None  # the sandbox's cap: optimizer steps and batches per fit
    rerun: bool = False  # Kaggle's scoring rerun of a code competition (hidden test set)
    place: ranks.Place = field(default_factory=ranks.Place)  # this process's rank and device
    _cache: Cache | None = field(default=None, repr=False)

    # What the report holds, read through the run (a unit records its chain, a fold its metrics).
    name = property(lambda self: self.report.name)
    output_dir = property(lambda self: self.report.output_dir)
    session = property(lambda self: self.report.session)
    metrics = property(lambda self: self.report.metrics)
    chain = property(lambda self: self.report.chain)
    previous = property(lambda self: self.report.previous)
    pid = property(lambda self: self.report.pid)

    def log(self, **metrics) -> None:
        """``Report.log``: facts into metrics.json."""
        self.report.log(**metrics)

    def log_fit(self, label: str, result, step_plot: bool = True, curves: bool | str = True) -> None:
        """``Report.log_fit``: a fit's summary into metrics.json, and its plots."""
        self.report.log_fit(label, result, step_plot=step_plot, curves=curves)

    def note(self, *said: str) -> None:
        """``Report.note``: what the run dropped, skipped or decided on the way."""
        self.report.note(*said)

    def savefig(self, fig, name: str) -> None:
        """``Report.savefig``: ``<output>/<name>.png``, shown inline."""
        self.report.savefig(fig, name)

    def table(self, rows: list[dict], digits: int = 4) -> None:
        self.report.table(rows, digits)

    def summary(self, headlines: list[dict]) -> None:
        """``Report.summary``: the closing cell's headline results."""
        self.report.summary(headlines)

    @property
    def precision(self):
        """The precision decided for this machine's card at ``start`` (``Precision``)."""
        return self.env.precision

    @property
    def device(self):
        """This process's device: cuda:<rank> in a launched rank, cuda:0 or the CPU here."""
        return self.place.device

    @property
    def rank(self) -> int:
        """This process's rank in a launch (0 in the notebook's own process)."""
        return self.place.rank

    @property
    def world_size(self) -> int:
        return self.place.world_size

    @property
    def is_main(self) -> bool:
        """The process that writes files and prints: rank 0, or the notebook's own."""
        return self.place.is_main

    @property
    def processes(self) -> int | None:
        """How many processes a launch starts: the ``processes`` parameter when the notebook
        has one and sets it, else None (one per GPU)."""
        return int(self.config.get("processes") or 0) or None

    def at(self, place: ranks.Place) -> Run:
        """This run as one rank of a launch sees it (``launch`` hands it to each rank)."""
        return dataclasses.replace(self, place=place)

    @property
    def resume(self) -> bool:
        return not self.force_retrain

    def budget(self) -> budget_mod.Budget:
        """The session's deadline, shared by every fit, fold and trial of the run."""
        return budget_mod.Budget(deadline=self.deadline)

    def launch(self, fn, *args, nprocs: int | None = None, **kwargs):
        """``fn(run, *args, **kwargs)`` on every GPU (one DDP process each, ``kk.launch``; as
        many as ``processes`` says when set); rank 0's return value. In each rank ``run.rank``
        and ``run.device`` are that rank's."""
        from ..parallel.launcher import launch
        return launch(fn, *args, nprocs=nprocs, run=self, **kwargs)

    @property
    def cache(self) -> Cache:
        """This run's result cache (``force_retrain`` recomputes every entry)."""
        if self._cache is None:
            self._cache = Cache(self.output_dir / "cache", force=self.force_retrain)
        return self._cache

    def unit(self, name: str, *, code=None, data=None, config: dict | None = None, leave_out: dict | None = None):
        """A unit of work of this run (``unit.Unit``), named by one key: the parameters ``code``
        (a function or class, or a list) reads, found in the code itself (every parameter
        without code), ``data``'s fingerprint, ``code``'s version (and the notebook code it
        reaches), and ``config``, the values handed to it that are not parameters (the searched
        ones). ``leave_out``: ``{parameter: why}``, the only way a parameter it reads is not
        its identity. The key names its cache entry, checkpoint folder and study."""
        from .unit import Unit
        return Unit.of(self, name, config, data, code, leave_out)

    def sub(self, folder: str) -> Run:
        """A run of its own in ``<output>/<folder>`` (its cache, checkpoints, folds and
        metrics.json), with this run's config, deadline, session and chain (what each unit
        did, in both metrics.json files): one notebook producing what separate kernels would
        (the blend's built-in sources)."""
        output = self.output_dir / folder
        output.mkdir(parents=True, exist_ok=True)
        self.metrics["chain"] = self.chain  # its units' record is this session's too (one dict)
        report = dataclasses.replace(self.report, output_dir=output, metrics={},
                                     previous=_previous_metrics(output))
        return dataclasses.replace(self, report=report, _cache=None)

    def scratch(self, name: str) -> Path:
        """A folder for files the run needs but never keeps (a study's savepoints), gone when the
        notebook's process exits or, killed first, with the next run's (``scratch``)."""
        return scratch.folder(self.env.where.temp, self.pid, f"{self.name}-{self.session}", name)

    def checkpoints(self, name: str = "model", *, config: dict | None = None, model=None,
                    **kwargs) -> CheckpointManager:
        """The checkpoints of fit ``name``: ``<output>/checkpoints/<name>``, also found in the
        attached inputs; the notebook's run-control parameters are not its identity.

        With ``model`` (and the fit's ``config``, default the run's), bound to that identity
        already: ``finished()``, ``restore_best(model)`` read that training's own folder, as
        the fit with the same config, model and ``data=`` writes it."""
        kwargs.setdefault("run_control", self.run_control)
        kwargs.setdefault("save_every_min", self.config.get("save_every_min", 20.0))  # the notebook's parameter
        manager = CheckpointManager(self.output_dir / "checkpoints" / name, config=config, **kwargs)
        if model is not None:
            manager.bind(manager.identity_for(self.config, model))
        return manager

    def data_dir(self, required: list[str] | tuple[str, ...] = (), table: bool = False) -> Path | None:
        """The ``data_dir`` parameter as the folder holding ``required`` (``datadir.resolve``: a
        folder, the ``owner/slug`` of an attached Kaggle source, the competition's file, or the
        folder above it), None when empty; where the files are not, it raises naming them."""
        return datadir.resolve(self.config.get("data_dir") or "", required, table)


def _previous_metrics(output: Path) -> dict:
    try:
        return json.loads((output / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def work_cap() -> int | None:
    """``KAGGLEKIT_WORK_CAP``: the sandbox's cap on optimizer steps per fit (None: off)."""
    value = os.environ.get(WORK_CAP_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{WORK_CAP_ENV}={value!r} must be a positive number of steps (or unset)")
    return int(value)


def deadline(config: dict, rerun: bool) -> float | None:
    """When the session's work must end: ``time_budget_s`` from now; else on Kaggle the
    session limit (the competition's cap, ``rerun_hours``, in a scoring rerun); else never."""
    budget_s = float(config.get("time_budget_s") or 0)
    if budget_s > 0:
        return time.time() + budget_s
    if rerun:
        hours = float(config.get("rerun_hours") or RERUN_HOURS)
        return budget_mod.Budget.for_kaggle(session_s=hours * 3600).deadline
    return budget_mod.Budget.resolve(None).deadline


def start(namespace: dict, name: str, *, smoke: dict | None = None,
          declared: dict | None = None, verbose: bool = True) -> Run:
    """Validate a notebook's parameters and set the run up; the run context.

    Args:
        namespace: the notebook's ``globals()``; parameters are read from it.
        name: the notebook's name (its output folder locally is ``runs/<name>``).
        smoke: parameter values that replace the given ones when ``smoke`` is true
            (a tiny run through every code path, for CI); recorded in the config.
        declared: ``{name: default}`` when not running in a notebook.
    """
    given = params.read(namespace, declared)
    config, run_control = given.values, given.run_control
    if config.get("smoke") and smoke:
        applied = _smoke(smoke, given)
        config.update(applied)
        namespace.update(applied)
    output = env.working_dir(name)
    os.environ[ranklog.LOG_DIR_ENV] = str(output / "logs")  # launched ranks write there
    report = env.describe_machine(config.get("precision", "auto"), output, verbose=verbose)
    seed = int(config.get("seed", 0))
    env.seed_everything(seed)
    config = json.loads(json.dumps(config, default=str))
    rerun = env.competition_rerun()
    _ = inputs.index(report.where.input_roots).by_name  # walk the inputs once, before any rank forks
    written = Report(name=name, config=config, env=report, output_dir=output, previous=_previous_metrics(output))
    run = Run(config=config, env=report, report=written, seed=seed,
              run_control=run_control, force_retrain=bool(config.get("force_retrain")),
              deadline=deadline(config, rerun), work_cap=work_cap(), rerun=rerun, place=ranks.here())
    run.data_dir(table=True)  # fail now, before any work, if the folder (or table) is missing
    if given.source:  # and every other path the run was given (model_dir, original_csv, ...)
        paths.check(given.source, config, report.where.input_roots)
    expected = os.environ.get("KAGGLEKIT_EXPECT_GPUS")  # set by the pushed notebook
    if expected:
        run.metrics["accelerator"] = env.check_accelerator(report.gpus, expected)
    if rerun and run.deadline is not None:
        run.metrics["competition_rerun"] = {"hours": (run.deadline - time.time()) / 3600}
        print(f"kagglekit: Kaggle's scoring rerun: {run.metrics['competition_rerun']['hours']:.2f} h "
              "left under the competition's cap; predicting the hidden test set only")
    run.report.save_metrics()
    return run


def _smoke(smoke: dict, given) -> dict:
    """The smoke values for what the user did not set: a value given with ``smoke=True`` is kept
    (and said), never replaced by a smaller one the folder's name does not tell."""
    unknown = sorted(set(smoke) - set(given.values))
    if unknown:
        raise params.ParameterError(f"smoke overrides {unknown} are not parameters")
    kept = {k: given.injected[k] for k in smoke if k in given.injected}
    if kept:
        display.notice("smoke run with your " + ", ".join(f"{k}={v!r}" for k, v in kept.items())
                       + " (smoke alone: " + ", ".join(f"{k}={smoke[k]!r}" for k in kept) + ")")
    return {k: v for k, v in smoke.items() if k not in kept}


if TYPE_CHECKING:  # the type checker holds Run to what fit reads (loop/fitoptions.py)
    from ..loop.fitoptions import RunOfAFit
    _RUN_IS_A_RUN_OF_A_FIT: type[RunOfAFit] = Run
