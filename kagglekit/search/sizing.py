"""Trials sized to the time a search has: a search of N trials that will not fit shrinks them.

``optimize(..., shrink=True)`` measures its first PROBE_TRIALS trials at full size, then sizes
the rest so that all of them fit the time left: each trial runs ``trial_scale(trial)`` of its
work (an objective multiplies its steps or epochs by it), never under MIN_SCALE; below that,
as many trials as fit run at MIN_SCALE and the search stops with the reason. The objective's
own time (``work_s``) shrinks with the scale; the rest of a trial's cycle (storage, lock,
sampler, heartbeat) does not, and is measured too. The estimate is printed once.
"""
from __future__ import annotations

import statistics
import time

from ..machine.budget import Budget

FINISHED = ("COMPLETE", "PRUNED")


MIN_SCALE = 0.25  # a trial shrunk further says too little: fewer trials instead
PROBE_TRIALS = 2  # trials measured at full size before the search's total is estimated


def trial_scale(trial) -> float:
    """The share of its full size this trial runs (its steps, epochs): 1.0, unless the search
    was started with ``shrink=True`` and its first trials showed the total will not fit the
    time left; then what fits (never under MIN_SCALE). Objectives size their work by it:
    ``steps = max(1, int(search_steps * kk.tune.trial_scale(trial)))``."""
    return float(trial.user_attrs.get("scale", 1.0))


def finished_trials(study) -> list:
    """The complete and pruned trials that have both their times."""
    return [t for t in study.get_trials(deepcopy=False)
            if t.state.name in FINISHED and t.datetime_complete and t.datetime_start]


def seconds(t) -> float:
    """A finished trial's time from ask to tell."""
    return (t.datetime_complete - t.datetime_start).total_seconds()


def fit_to_budget(study, n_trials: int, finished: int, running: int, budget: Budget,
                   workers: int) -> tuple[float, int]:
    """(scale of the next trials, the total the budget holds). The scale is decided once, from
    the first PROBE_TRIALS full-size trials: their objective's time (``work_s``) scales, the
    rest of a trial (Optuna's storage, the heartbeat) does not. After that, the total follows
    the time the shrunk trials really take."""
    room = max(0.0, budget.remaining()) * workers / 1.1  # a tenth kept back for the slowest
    done = finished_trials(study)
    if "scale" in study.user_attrs:
        scale = study.user_attrs["scale"]
        at_scale = [seconds(t) for t in done if t.user_attrs.get("scale", 1.0) == scale]
        typical = statistics.median(at_scale) if at_scale else None
        total = n_trials if typical is None else min(n_trials, finished + running + int(room / typical))
        return scale, total
    probes = [t for t in done if t.user_attrs.get("scale", 1.0) == 1.0 and "work_s" in t.user_attrs]
    left = n_trials - finished - running
    if len(probes) < PROBE_TRIALS or left <= 0 or budget.remaining() == float("inf"):
        return 1.0, n_trials
    full = statistics.median(t.user_attrs["work_s"] for t in probes)
    # A trial's whole cycle (storage, lock, sampler, heartbeat: from one start to the next)
    # less its objective's time: what a smaller trial does not shrink.
    # (Probes of an earlier session leave a gap between them: then ask-to-tell time alone.)
    since = min(t.datetime_start.timestamp() for t in probes)
    cycle = min((time.time() - since) / len(probes), 3 * statistics.median(seconds(t) for t in probes))
    overhead = max(0.0, cycle - statistics.fmean(t.user_attrs["work_s"] for t in probes))
    scale = min(1.0, (room / left - overhead) / full) if full > 0 else 1.0
    total = n_trials
    if scale < MIN_SCALE:
        scale = MIN_SCALE
        total = finished + running + int(room / (overhead + MIN_SCALE * full))
    fits = "full size" if scale == 1.0 else f"each trial at {scale:.2f} of its size"
    cut = f"; {total} trials of {n_trials} fit at that size" if total < n_trials else ""
    print(f"kagglekit tune: {study.study_name}: {left} trials left at {full:.1f} s each (full size, "
          f"{workers} worker(s)) need {(full + overhead) * left / workers / 60:.1f} min; "
          f"{budget.remaining() / 60:.1f} min left: {fits}{cut}", flush=True)
    study.set_user_attr("scale", scale)
    return scale, total
