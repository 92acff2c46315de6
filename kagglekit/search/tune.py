"""Optuna searches that survive Kaggle sessions and use every GPU.

- The study lives in SQLite in the working dir (or any storage URL given), so it is
  saved with the kernel's output; a new kernel version copies the previous
  version's study from the attached inputs and carries on.
- ``n_trials`` is the *total* target across versions: each version runs what is left.
- Heartbeats mark running trials; a trial whose process died (a killed session, an
  out-of-memory kill) is failed once its heartbeat is stale and its parameters are
  retried (Optuna's RetryHeartbeatStaleTrialCallback).
- Workers: one process per GPU (each sees only its GPU) or N on CPU. A file lock
  around "count, then ask" makes the total exact: no trial lost, none run twice.
- A trial is only started when its measured duration still fits the time budget;
  ``shrink=True`` sizes the trials so that all of them fit (``sizing``).
- ``summarize``: the best trials, every trial as CSV, Optuna's plots (``studyreport``).
"""
from __future__ import annotations

import functools
import os
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from ..loop import progress
from ..machine.budget import Budget, Unfinished, whole_or_nothing
from ..parallel import workers as worker_policy
from ..parallel.forked import run_forked
from . import sizing, studystore
from .sizing import FINISHED, MIN_SCALE, trial_scale  # noqa: F401 (kk.tune.trial_scale in objectives)
from .studyreport import counts, summarize  # noqa: F401 (kk.tune.summarize in notebooks)


def _storage(url: str, heartbeat_s: int, grace_s: int, max_retry: int):
    import optuna
    if not os.environ.get("KAGGLEKIT_VERBOSE"):  # "A new study created..." on every load
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return studystore.open_storage(url, heartbeat_s, grace_s, max_retry)


def load_study(name: str, url: str, direction: str, *, sampler=None, pruner=None,
               heartbeat_s: int = 10, grace_s: int = 30, max_retry: int = 3, **search):
    """The study, created or continued (``search``: the search's own options, not the study's)."""
    import optuna
    return optuna.create_study(
        study_name=name, storage=_storage(url, heartbeat_s, grace_s, max_retry),
        direction=direction, sampler=sampler, load_if_exists=True,  # type: ignore[arg-type]  # checked by optuna
        pruner=pruner if pruner is not None else optuna.pruners.MedianPruner(
            n_startup_trials=3, n_warmup_steps=1))


def trial_seconds(study) -> float | None:
    """Median duration of the finished trials (None before the first)."""
    durations = [sizing.seconds(t) for t in sizing.finished_trials(study)]
    return statistics.median(durations) if durations else None


FAILS_BEFORE_GIVING_UP = 3  # this session's first trials all failed: the objective is broken


def _failing(study, session_start: int, n_trials: int) -> str | None:
    """Why to stop for failed trials, or None. Only this session's trials count: the
    failures of an earlier session (a bug fixed since, a killed kernel) do not stop the
    search that follows the fix."""
    mine = [t.state.name for t in study.get_trials(deepcopy=False)
            if t.number >= session_start and not t.user_attrs.get("cut_short")]  # the deadline's, not the objective's
    failed = mine.count("FAIL")
    finished = sum(mine.count(s) for s in FINISHED)
    if failed >= FAILS_BEFORE_GIVING_UP and finished == 0:
        return (f"the first {failed} trials of this session failed (their errors are above): "
                "fix the objective and run again; the search carries on from its finished trials")
    if failed > max(FAILS_BEFORE_GIVING_UP, n_trials):
        return f"too many failed trials ({failed} in this session)"
    return None


def _ran_out(study, session_start: int, budget: Budget) -> bool:
    """Has this session's time run out for the search: the deadline passed, or a trial of this
    session cut short by it (the fits of any trial started now would be cut too)?"""
    return not budget.allows(0.0) or any(t.user_attrs.get("cut_short") for t in study.get_trials(deepcopy=False)
                                         if t.number >= session_start)


def _next_trial(study, url: str, lock: Path, n_trials: int, budget: Budget, options: dict):
    """Under the lock: fail stale trials, then ask for a trial if one is still due.

    Returns (trial or None, reason to stop or None).
    """
    import optuna
    with studystore.locked(study._storage, url, study.study_name, lock), warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        studystore.fail_stale(study, options.get("grace_s", 30), options.get("max_retry", 3))
        c = counts(study)
        finished, running = sum(c.get(s, 0) for s in FINISHED), c.get("RUNNING", 0)
        if finished + running >= n_trials:
            return None, "target reached"
        refusal = _failing(study, options.get("session_start", 0), n_trials)
        if refusal:
            return None, refusal
        scale, total = 1.0, n_trials
        if options.get("shrink"):
            scale, total = sizing.fit_to_budget(study, n_trials, finished, running, budget, options["workers"])
            if finished + running >= total:
                return None, f"time budget: {total} of {n_trials} trials fit, at {scale:.2f} of their size"
        typical = trial_seconds(study)
        if _ran_out(study, options.get("session_start", 0), budget) or (
                typical is not None and not budget.allows(1.2 * typical * scale)):
            return None, "time budget"
        # Optuna warns that heartbeats are meant for Study.optimize; _work records them.
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        trial = study.ask()
        trial.set_user_attr("scale", scale)
        return trial, None


def _work(objective: Callable, name: str, url: str, direction: str, n_trials: int,
          lock: Path, budget: Budget, options: dict, seed: int | None = None,
          worker: int = 0) -> str:
    """One worker: ask, run with a heartbeat, tell; until the target or the budget."""
    import optuna
    study = load_study(name, url, direction, **options)
    if options.get("sampler") is None and seed is not None:
        # Reproducible for a given seed, yet no two workers (nor two sessions of one
        # search) draw the same points: each gets its own stream.
        study.sampler = optuna.samplers.TPESampler(
            seed=seed + 7919 * worker + 104729 * len(study.trials))
    while True:
        trial, reason = _next_trial(study, url, lock, n_trials, budget, options)
        if trial is None:
            return reason
        started = time.monotonic()
        with studystore.heartbeat(study._storage, trial._trial_id, options.get("heartbeat_s", 10) / 2), \
                progress.quiet():  # one line per trial, not a progress bar per fit
            try:
                try:
                    with whole_or_nothing():  # a fit the deadline cuts short raises Unfinished
                        value = objective(trial)
                finally:  # the objective's own time: what a smaller trial shrinks
                    if options.get("shrink"):
                        trial.set_user_attr("work_s", time.monotonic() - started)
            except optuna.TrialPruned as pruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                _say(trial, f"pruned ({pruned})", started)
                continue
            except Unfinished as cut:  # not the objective's fault, and no value: the next version runs it
                trial.set_user_attr("cut_short", str(cut)[:500])
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                study.enqueue_trial(trial.params)  # the same point first (the defaults, when it was them)
                _say(trial, "cut short by the session's time (not counted: the next version runs it again)", started)
                return "time budget"
            except Exception as err:  # noqa: BLE001 - one bad trial must not end the search
                trial.set_user_attr("error", f"{type(err).__name__}: {err}"[:500])
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                _say(trial, f"failed: {type(err).__name__}: {err}", started)
                continue
        study.tell(trial, value)
        _say(trial, f"{value:.4g}", started)


def _say(trial, outcome: str, started: float) -> None:
    params = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in trial.params.items())
    print(f"kagglekit tune: trial {trial.number}: {outcome} [{params}] "
          f"{time.monotonic() - started:.1f}s", flush=True)


def _worker(gpus: int, args: tuple, index: int) -> str:
    """One search worker in its own process: its GPU (cuda:0 of what it sees, where
    ``run.device`` points) and its trials."""
    if gpus:
        worker_policy.pin_gpu(index)
    return _work(*args, worker=index)  # type: ignore[misc]  # args: _work's up to seed


def optimize(objective: Callable, name: str, n_trials: int, *, directory: Path | str,
             direction: str = "maximize", workers: int | None = None, storage: str | None = None,
             time_budget=None, sampler=None, pruner=None, seed: int | None = 0,
             heartbeat_s: int = 10, grace_s: int = 30, max_retry: int = 3, key=None,
             first_params: dict | None = None, run=None, shrink: bool = False,
             budget_share: float = 1.0):
    """Run ``objective`` until the study holds ``n_trials`` finished trials in total.

    Args:
        objective: ``objective(trial) -> float``; report per-epoch values with
            ``pruning_hook(trial)`` in ``fit(on_epoch_end=...)`` to be pruned early.
        name: study name; the SQLite file is ``<directory>/<name>.db``.
        key: what the trials depend on besides their own parameters (the data, fixed
            settings; anything ``cache.fingerprint`` takes). The study is kept per key
            (``<name>-<fingerprint>``): a search on other data starts its own study
            instead of continuing, and counting, the trials of another data set.
        n_trials: total finished (complete or pruned) trials across all sessions.
        workers: processes (default: one per GPU, else 1). Each sees only its GPU (its
            cuda:0, where ``run.device`` and a fit without a device point). They run
            under ``launch``'s supervisor: one failing stops the others.
        storage: where the study lives instead of the SQLite file: a SQLAlchemy URL
            (PostgreSQL: one study for several kernels or machines), ``journal:<path>`` on a
            shared folder, or ``env:NAME`` / ``secret:NAME`` holding the URL (see studystore).
        time_budget: seconds or a Budget (default: the run's, else the Kaggle session
            limit on Kaggle).
        sampler / pruner: Optuna's (default: TPESampler seeded from ``seed`` per worker
            and session, and MedianPruner); ``seed=None`` leaves the default unseeded.
        first_params: the first trial of a new study (say, the notebook's defaults), so
            the best of a short search is never worse on validation than its start.
        run: the run context (``kk.start``'s): its deadline bounds the search.
        shrink: size trials to the time left (``sizing``): after two full-size trials the rest
            run at the scale (``trial_scale``) that fits them all, or at MIN_SCALE as many as
            fit; the estimate is printed. Pruned trials count as finished.
        budget_share: the share of the time left the search may take (the rest is the final
            training's), when the budget has a deadline.
    Returns the study (loaded in this process).
    """
    from ..machine.gpus import inventory
    if key is not None:  # named as a unit of that data is: <name>-<unit key>
        from ..state import keys
        name = f"{name}-{keys.key(None, data=key)}"
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / f"{name}.db"
    if storage is None:
        adopted = studystore.adopt_previous(db, name)
        if adopted is not None:
            print(f"kagglekit tune: continuing the study found in {adopted}")
    url = studystore.resolve(storage) if storage else studystore.storage_url(db)  # never printed
    gpus = len(inventory())
    workers = workers or worker_policy.processes()
    options = {"sampler": sampler, "pruner": pruner, "heartbeat_s": heartbeat_s,
               "grace_s": grace_s, "max_retry": max_retry, "shrink": shrink, "workers": workers}
    study = load_study(name, url, direction, **options)  # creates the tables once
    options["session_start"] = len(study.trials)  # failures before this count no more
    if first_params and not study.trials:
        study.enqueue_trial(first_params)
    budget = Budget.resolve(time_budget if time_budget is not None or run is None else run.budget())
    if budget_share < 1.0 and budget.remaining() != float("inf"):
        budget = Budget(deadline=time.time() + budget_share * max(0.0, budget.remaining()))
    args = (objective, name, url, direction, n_trials,
            directory / f".{name}.lock", budget, options, seed)
    done = sum(counts(study).get(s, 0) for s in FINISHED)
    if done >= n_trials:  # a later session of a finished search: no worker to start
        reason = "target reached"
    elif workers == 1:
        reason = _work(*args)
    else:
        run_forked(functools.partial(_worker, gpus, args), workers, what="tune worker",
                   threads=worker_policy.threads_each(workers))
        reason = "workers finished"
    study = load_study(name, url, direction, **options)
    print(f"kagglekit tune: {name}: {counts(study)} ({reason})")
    _refuse_a_search_that_only_failed(study, options["session_start"], n_trials)
    return study


class SearchFailed(RuntimeError):
    """Every trial of the search failed: there is no best trial to go on with."""


def _refuse_a_search_that_only_failed(study, session_start: int, n_trials: int) -> None:
    """Raise with the first error when this session gave up and no trial ever finished (the
    notebook's next line, ``study.best_params``, would fail with Optuna's bare message)."""
    reason = _failing(study, session_start, n_trials)
    trials = study.get_trials(deepcopy=False)
    if reason is None or any(t.state.name in FINISHED for t in trials):
        return
    errors = [t.user_attrs["error"] for t in trials
              if t.number >= session_start and "error" in t.user_attrs]
    first = errors[0] if errors else "not recorded"
    raise SearchFailed(f"search {study.study_name!r}: {reason}. The first error: {first}")


def best(objective: Callable, name: str, n_trials: int, *, defaults: dict, run, key=None,
         direction: str = "minimize", study: str | None = None, leave_out: dict | None = None,
         **options) -> dict:
    """A search as a notebook runs one: ``optimize`` (its first trial at ``defaults``, its study
    in the run's ``tune`` folder, or ``study`` as a unit names it, ``unit.study``), its report in
    metrics.json (``search_<name>``) and its files, and the parameters to go on with: ``defaults``
    updated with the best trial's (``defaults`` alone when ``n_trials`` is 0).

    The study is the unit ``name`` of ``objective`` (``run.unit``): the parameters it reads,
    found in its code, its code and ``key``, the data the trials read (``leave_out``: parameters
    it reads that do not change a trial's value, by name with the reason). More trials continue
    the same study; a trial that would score otherwise starts another."""
    if not n_trials:
        return dict(defaults)
    study_name = study or run.unit(name, data=key, code=objective, leave_out=leave_out).study
    found = optimize(objective, study_name, n_trials, directory=run.output_dir / "tune", direction=direction,
                     first_params=defaults, run=run, seed=run.seed, **options)
    run.log(**{f"search_{name}": summarize(found, run.output_dir, prefix=f"tune_{name}")})
    failed = [t for t in found.get_trials(deepcopy=False)
              if t.state.name == "FAIL" and not t.user_attrs.get("cut_short")]  # cut short: no failure
    if failed:  # beside the results, not only in the study's table
        first = failed[0].user_attrs.get("error", "not recorded")
        run.note(f"search {name}: {len(failed)} of {len(found.trials)} trials failed (the first: {first})")
    if not any(t.state.name == "COMPLETE" for t in found.get_trials(deepcopy=False)):
        run.note(f"search {name}: no trial finished in this session's time (the next version carries on): "
                 "going on with the defaults")
        return dict(defaults)
    return {**defaults, **found.best_params}


def pruning_hook(trial, monitor: str = "val_loss"):
    """``on_epoch_end`` hook for ``fit``: report ``monitor`` and prune a poor trial."""
    import optuna

    def hook(state) -> None:
        value = state.history[-1][monitor]
        trial.report(value, step=state.epoch)
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned at epoch {state.epoch} ({monitor}={value:.4g})")
    return hook
