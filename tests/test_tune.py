import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, loaders as data, models, tune
from kagglekit.search import sizing, studyreport

JOB = Path(__file__).parent / "jobs" / "tune_job.py"


def busy_objective(trial):
    x = trial.suggest_float("x", -3, 3)
    y = trial.suggest_int("y", 0, 4)
    total = 0
    for i in range(200_000):  # CPU work, so two workers really run side by side
        total += i
    return -(x - 1) ** 2 - y


def test_two_workers_complete_exactly_n_distinct_trials(tmp_path):
    study = tune.optimize(busy_objective, "two", 12, directory=tmp_path, workers=2,
                          heartbeat_s=1, grace_s=3)
    trials = study.get_trials()
    assert tune.counts(study) == {"COMPLETE": 12}
    assert sorted(t.number for t in trials) == list(range(12))
    summary = tune.summarize(study, tmp_path)
    assert summary["best_params"].keys() == {"x", "y"}
    assert (tmp_path / "tune_trials.csv").read_text().count("\n") == 13
    assert "tune_history.png" in summary["plots"]


def test_a_finished_search_starts_no_worker_in_a_later_session(tmp_path, monkeypatch):
    """Every later kernel version of a finished search would have started its workers for
    nothing (two processes per search on T4 x2)."""
    first = tune.optimize(busy_objective, "done", 3, directory=tmp_path, workers=1)
    monkeypatch.setattr(tune, "run_forked", lambda *a, **k: pytest.fail("workers started"))
    again = tune.optimize(busy_objective, "done", 3, directory=tmp_path, workers=2)
    assert tune.counts(again) == tune.counts(first) == {"COMPLETE": 3}


@pytest.mark.slow
def test_a_killed_search_restarted_ends_with_exactly_n_and_retries_the_killed_trial(tmp_path):
    proc = subprocess.Popen([sys.executable, str(JOB), str(tmp_path), "6", "0.5"],
                            stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("trial 2 started"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    proc.stdout.close()
    time.sleep(3)  # longer than the grace period: the killed trial's heartbeat is stale
    done = subprocess.run([sys.executable, str(JOB), str(tmp_path), "6", "0.05"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    study = tune.load_study("killed", kk.studystore.storage_url(tmp_path / "killed.db"), "maximize")
    states = tune.counts(study)
    assert states == {"COMPLETE": 6, "FAIL": 1}
    retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == 2]
    killed = study.trials[2]
    assert killed.state.name == "FAIL" and len(retried) == 1
    assert retried[0].params == killed.params and retried[0].state.name == "COMPLETE"


def test_a_study_in_an_attached_input_is_continued_not_restarted(tmp_path, kaggle_tree):
    previous = tmp_path / "v1"
    tune.optimize(busy_objective, "carry", 4, directory=previous, workers=1)
    mounted = kaggle_tree / "input" / "notebooks" / "me" / "kernel" / "tune"
    mounted.mkdir(parents=True)
    shutil.copy(previous / "carry.db", mounted / "carry.db")
    first_four = [t.params for t in tune.load_study(
        "carry", kk.studystore.storage_url(previous / "carry.db"), "maximize").trials]
    working = kaggle_tree / "working" / "tune"
    study = tune.optimize(busy_objective, "carry", 7, directory=working, workers=1)
    assert tune.counts(study) == {"COMPLETE": 7}
    assert [t.params for t in study.trials[:4]] == first_four  # the old trials, kept
    assert (mounted / "carry.db").stat().st_size == (previous / "carry.db").stat().st_size


def _fit_objective(trial):
    kk.seed_everything(0)
    ds = datasets.tabular(512, features=16, seed=0)
    train, val = datasets.split(ds)
    model = models.MLP(16, 32, 4)
    lr = trial.suggest_float("lr", 0.0, 0.1)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=lr),
                    data.make_loader(train, 32, num_workers=0), kk.supervised(F.cross_entropy),
                    epochs=4, val_loader=data.make_loader(val, 128, train=False, num_workers=0),
                    on_epoch_end=tune.pruning_hook(trial, "val_loss"), progress=False)
    return result.history[-1]["val_loss"]


def test_a_deliberately_bad_configuration_is_pruned(tmp_path):
    study = tune.load_study("prune", kk.studystore.storage_url(tmp_path / "prune.db"), "minimize",
                            pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0))
    for lr in (0.05, 0.08, 0.1, 0.0):  # three sound ones, then one that never learns
        study.enqueue_trial({"lr": lr})
    study = tune.optimize(_fit_objective, "prune", 4, directory=tmp_path, direction="minimize",
                          pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0))
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "PRUNED"]
    assert len(study.trials[3].intermediate_values) == 1  # stopped after its first epoch


def test_the_time_budget_stops_before_a_trial_that_would_overrun(tmp_path):
    def slow(trial):
        trial.suggest_float("x", 0, 1)
        time.sleep(0.4)
        return 1.0

    budget = kk.Budget(4.0)
    study = tune.optimize(slow, "budget", 50, directory=tmp_path, workers=1, time_budget=budget)
    finished = tune.counts(study).get("COMPLETE", 0)
    assert 2 <= finished < 50 and tune.counts(study) == {"COMPLETE": finished}
    # Every trial ended before the deadline: none was started that could not finish.
    assert all(t.datetime_complete.timestamp() <= budget.deadline for t in study.trials)


def test_optunas_plot_style_does_not_leak_into_the_runs_other_plots(tmp_path):
    import matplotlib

    from kagglekit.run.plots import pyplot
    pyplot()  # the kit's own headless backend choice is not what this test is about
    before = dict(matplotlib.rcParams)
    study = tune.optimize(busy_objective, "style", studyreport.MIN_TRIALS_FOR_PLOTS, directory=tmp_path,
                          workers=1)
    assert tune.summarize(study, tmp_path)["plots"]
    assert dict(matplotlib.rcParams) == before


def test_the_default_sampler_is_seeded_so_a_search_repeats():
    def quick(trial):
        return -(trial.suggest_float("x", -3, 3) - 1) ** 2

    def params(folder, seed):
        study = tune.optimize(quick, "seeded", 4, directory=folder, seed=seed)
        return [t.params["x"] for t in study.trials]

    first = params(Path("a"), 0)
    assert params(Path("b"), 0) == first  # the same search, the same trials
    assert params(Path("c"), 1) != first
    # A second session continuing a study draws new points, not the first session's again.
    continued = tune.optimize(quick, "seeded", 8, directory=Path("a"), seed=0)
    xs = [t.params["x"] for t in continued.trials]
    assert xs[:4] == first and len(set(xs)) == 8


def test_too_few_trials_for_a_readable_plot_get_none(tmp_path, capsys):
    study = tune.optimize(busy_objective, "few", 3, directory=tmp_path, workers=1)
    assert tune.summarize(study, tmp_path)["plots"] == []
    assert not list(tmp_path.glob("*.png")) and "too few for Optuna's plots" in capsys.readouterr().out


def test_on_two_gpus_each_worker_runs_its_trials_on_its_own_card(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_FAKE_GPUS", "Tesla T4:7.5:15,Tesla T4:7.5:15")

    def objective(trial):  # what a fit inside the objective would train on
        trial.set_user_attr("visible", os.environ.get("CUDA_VISIBLE_DEVICES"))
        trial.set_user_attr("device", str(kk.ranks.default_device()))
        trial.set_user_attr("trees", kk.boosting.xgboost_device())  # XGBoost's device there
        time.sleep(0.3)  # long enough that both workers take trials
        return trial.suggest_float("x", 0, 1)

    study = tune.optimize(objective, "placed", 6, directory=tmp_path, heartbeat_s=2)
    placed = {(t.user_attrs["visible"], t.user_attrs["device"]) for t in study.trials}
    assert placed == {("0", "cuda:0"), ("1", "cuda:0")}  # one worker per card, each sees its own
    assert {t.user_attrs["trees"] for t in study.trials} == {"cuda"}


def _sleeper(full_s: float):
    """A trial whose work is its scale times ``full_s`` seconds (what steps x scale cost)."""
    def objective(trial):
        time.sleep(full_s * tune.trial_scale(trial))
        return trial.suggest_float("x", 0, 1)
    return objective


def test_a_search_whose_first_trials_show_100_will_not_fit_runs_what_fits_at_a_quarter_size(tmp_path, capsys):
    """100 trials of 0.5 s in 8 s: after two full-size trials the estimate (49 s for the rest)
    is printed, the rest run at a quarter of their size, as many as fit, and the search stops
    with the reason before the budget runs out, not in the middle of a trial."""
    study = tune.optimize(_sleeper(0.5), "s", 100, directory=tmp_path, workers=1, time_budget=8.0,
                          shrink=True)
    scales = [t.user_attrs["scale"] for t in study.trials]
    assert scales[:2] == [1.0, 1.0] and set(scales[2:]) == {tune.MIN_SCALE}
    assert 2 < len(study.trials) < 100 and all(t.state.name == "COMPLETE" for t in study.trials)
    out = capsys.readouterr().out
    import re
    # the per-trial time and the minutes left are measured (a loaded machine's first trial is slower)
    assert re.search(r"98 trials left at \d+\.\d s each \(full size, 1 worker\(s\)\) need \d+\.\d min; "
                     r"\d+\.\d min left: each trial at 0\.25 of its size; \d+ trials of 100 fit", out), out
    assert "(time budget: " in out


def _probed_study(n_probes: int = 2, work_s: float = 1.0, cycle_s: float = 1.2):
    """A study whose full-size trials each took ``work_s`` in the objective and ``cycle_s`` from
    one start to the next (Optuna's storage and sampler the rest), the last ending now."""
    import datetime
    now = datetime.datetime.now()
    study = optuna.create_study(study_name="probed")
    for i in range(n_probes):
        start = now - datetime.timedelta(seconds=cycle_s * (n_probes - i))
        study.add_trial(optuna.trial.FrozenTrial(
            number=i, trial_id=i, state=optuna.trial.TrialState.COMPLETE, value=1.0, values=None,
            datetime_start=start, datetime_complete=start + datetime.timedelta(seconds=work_s),
            params={}, distributions={}, user_attrs={"scale": 1.0, "work_s": work_s},
            system_attrs={}, intermediate_values={}))
    return study


@pytest.mark.parametrize("n_trials, scale, total", [
    (12, 0.8, 12),  # 10 left in 10 s of room: 1 s a trial, 0.2 s of it Optuna's -> 0.8 of the work
    (3, 1.0, 3),  # one left: full size
    (100, tune.MIN_SCALE, 2 + int(10 / (0.2 + 0.25))),  # a quarter size, as many as fit
])
def test_the_first_trials_measured_time_sizes_the_rest_to_fit_the_budget(n_trials, scale, total, capsys):
    """The arithmetic behind shrink=True, on trials of known times (no clock in the test): the
    objective's time shrinks with the scale, the cycle's rest does not; room is the time left
    less a tenth."""
    study = _probed_study()
    got_scale, got_total = sizing.fit_to_budget(study, n_trials, 2, 0, kk.Budget(11.0), workers=1)
    assert got_scale == pytest.approx(scale, abs=0.01) and got_total == total
    assert study.user_attrs["scale"] == got_scale  # decided once, kept for the next trials
    assert f"{n_trials - 2} trials left at 1.0 s each" in capsys.readouterr().out


def test_a_search_that_only_fails_stops_with_its_error_and_the_fixed_one_carries_on(tmp_path):
    """The failures of earlier sessions (a bug since fixed) never stop the search that
    follows the fix; a session whose first trials all fail stops there, saying why."""
    def broken(trial):
        trial.suggest_float("x", 0, 1)
        raise KeyError("lr_max")  # the notebook's typo

    for _ in range(2):  # two sessions before the fix: 6 failed trials, more than n_trials
        with pytest.raises(tune.SearchFailed, match=r"first 3 trials of this session failed.*"
                                                    r"fix the objective.*KeyError: 'lr_max'"):
            tune.optimize(broken, "fixed", 4, directory=tmp_path, workers=1)
    assert tune.counts(tune.load_study("fixed", kk.studystore.storage_url(tmp_path / "fixed.db"),
                                       "maximize")) == {"FAIL": 6}
    study = tune.optimize(lambda t: t.suggest_float("x", 0, 1), "fixed", 4, directory=tmp_path,
                          workers=1)
    assert tune.counts(study) == {"FAIL": 6, "COMPLETE": 4}


SESSION = {}  # what a session gives a search: its time (the next version has more)
CUT_DATA = torch.randn(64, 4, generator=torch.Generator().manual_seed(0)), torch.arange(64) % 2


def _cut_objective(trial):
    lr = trial.suggest_float("lr", 1e-3, 1e-1, log=True)
    model = torch.nn.Linear(4, 2)
    loader = data.make_loader(torch.utils.data.TensorDataset(*CUT_DATA), 8, num_workers=0)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=lr), loader, kk.supervised(F.cross_entropy),
                    run=kk.Alone(device="cpu", time_budget=SESSION["budget"]), epochs=SESSION["epochs"],
                    progress=False)
    return min(h["train_loss"] for h in result.history)  # as the forecast's: no epoch, no value


def test_a_trial_the_sessions_deadline_cuts_short_is_run_again_by_the_next_version(tmp_path, monkeypatch, capsys):
    """The deadline passed mid-search (a forecast's LSTM search under a time budget): each
    trial's fit stopped before its first epoch, and four failed trials ended the notebook with
    SearchFailed. A trial whose fit the deadline cut short is no failure and has no value: the
    search stops for the time, goes on with the defaults, and the next session runs that same
    point (here the defaults) first."""
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    run = kk.start({"seed": 0}, "cut", declared={"seed": 0}, verbose=False)
    SESSION.update(budget=0.5, epochs=10_000)
    objective = _cut_objective  # its study's key: its code and the parameters it reads, the same both sessions
    assert tune.best(objective, "cut", 3, defaults={"lr": 0.01}, run=run, direction="minimize") == {"lr": 0.01}
    said = capsys.readouterr().out
    assert "cut short by the session's time" in said and "(time budget)" in said
    db = next((tmp_path / "out" / "tune").glob("*.db"))
    trials = tune.load_study(db.stem, kk.studystore.storage_url(db), "minimize").get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"] and trials[0].user_attrs["cut_short"]

    SESSION.update(budget=None, epochs=2)  # the next version, with the time to finish
    tune.best(objective, "cut", 3, defaults={"lr": 0.01}, run=run, direction="minimize")
    trials = tune.load_study(db.stem, kk.studystore.storage_url(db), "minimize").get_trials(deepcopy=False)
    done = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(done) == 3 and done[0].params == {"lr": 0.01}  # the point cut short, first
