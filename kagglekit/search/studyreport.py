"""A finished search, reported: the best trials as a table, every trial as CSV, the best
parameters as JSON and Optuna's own plots (when there are enough trials to say anything)."""
from __future__ import annotations

import warnings
from pathlib import Path

MIN_TRIALS_FOR_PLOTS = 5  # importances and history from fewer trials say nothing


def counts(study) -> dict:
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def summarize(study, output_dir: Path | str, prefix: str = "tune") -> dict:
    """Best parameters (JSON), every trial (CSV), Optuna's own plots; a summary dict."""
    import csv
    import io

    from ..state import atomic
    output_dir = Path(output_dir)
    trials = study.get_trials(deepcopy=False)
    params = sorted({k for t in trials for k in t.params})
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["number", "state", "value", "seconds", *params])
    for t in trials:
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else ""
        writer.writerow([t.number, t.state.name, t.value, seconds, *(t.params.get(p) for p in params)])
    atomic.write_bytes(output_dir / f"{prefix}_trials.csv", buf.getvalue().encode())
    completed = [t for t in trials if t.state.name == "COMPLETE"]
    summary = {"study": study.study_name, "trials": counts(study)}
    _show_best(study, completed)
    if completed:
        summary.update(best_value=study.best_value, best_params=study.best_params,
                       best_trial=study.best_trial.number)
        atomic.write_json(output_dir / f"{prefix}_best_params.json", study.best_params)
    summary["plots"] = []
    if len(completed) >= MIN_TRIALS_FOR_PLOTS:
        summary["plots"] = _plots(study, output_dir, prefix)
    else:
        print(f"kagglekit tune: {len(completed)} completed trial(s): too few for Optuna's plots "
              f"(they need {MIN_TRIALS_FOR_PLOTS} to say anything)")
    return summary


def _show_best(study, completed: list, top: int = 5) -> None:
    """The best trials as a table in the notebook (the whole list is in the CSV)."""
    from ..machine import display
    reverse = study.direction.name == "MAXIMIZE"
    best = sorted(completed, key=lambda t: t.value, reverse=reverse)[:top]
    display.show_table([{"trial": t.number, "value": t.value, **t.params} for t in best])


def _plots(study, output_dir: Path, prefix: str) -> list[str]:
    from optuna.visualization import matplotlib as ovm

    from ..run.context import save_figure
    from ..run.plots import pyplot
    plt = pyplot()
    made = []
    for name, plot in (("history", ovm.plot_optimization_history),
                       ("importances", ovm.plot_param_importances),
                       ("parallel", ovm.plot_parallel_coordinate)):
        # rc_context: Optuna switches matplotlib to its "ggplot" style globally; keep it local.
        with warnings.catch_warnings(), plt.rc_context():
            warnings.simplefilter("ignore")  # Optuna marks these "experimental"
            try:
                ax = plot(study)
            except Exception as err:  # noqa: BLE001 - e.g. one parameter only: no importances
                print(f"kagglekit tune: no {name} plot ({type(err).__name__}: {err})")
                continue
            fig = (ax.flat[0] if hasattr(ax, "flat") else ax).figure
            path = save_figure(fig, output_dir / f"{prefix}_{name}.png")
        made.append(path.name)
    return made
