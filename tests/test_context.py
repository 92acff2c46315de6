"""The run context kk.start returns reaches every fit it is given, in this process and in
launched ranks; it is passed explicitly, never installed in a module."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, inputs, models

DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto",
            "data_dir": ""}


def _start(**values):
    config = {**DECLARED, **values}
    return kk.start(dict(config), "policy", declared=dict(DECLARED), verbose=False)


def _fit_with_run_defaults(run, steps: int = 6, epochs: int = 2) -> dict:
    """A fit that passes no resume, budget, precision or config: the run decides them."""
    torch.manual_seed(0)
    ds = datasets.tabular(256, features=8)
    model = models.MLP(8, 16, 4)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    kk.make_loader(ds, 32, seed=0, num_workers=0), kk.supervised(F.cross_entropy),
                    run=run, epochs=epochs, max_steps=steps, checkpoints="m", progress=False)
    return {"stopped": result.stopped, "steps_this_session": result.steps_this_session,
            "resumed_from": result.resumed_from, "precision": result.precision,
            "rank": kk.ranks.rank()}


@pytest.mark.slow
def test_force_retrain_and_the_time_budget_reach_every_fit_in_launched_ranks(tmp_path):
    os.environ["KAGGLEKIT_OUTPUT"] = str(tmp_path / "out")
    try:
        run = _start()
        first = run.launch(_fit_with_run_defaults, nprocs=2)
        assert first["stopped"] == "max_steps" and first["steps_this_session"] == 6
        again = run.launch(_fit_with_run_defaults, nprocs=2)  # finished: skipped, not retrained
        assert again["stopped"] == "already_complete" and again["steps_this_session"] == 0
        forced = _start(force_retrain=True).launch(_fit_with_run_defaults, nprocs=2)
        assert forced["stopped"] == "max_steps" and forced["steps_this_session"] == 6
        assert forced["resumed_from"] is None
        late = _start(force_retrain=True, time_budget_s=0.001)  # a deadline already passed
        out_of_time = late.launch(_fit_with_run_defaults, 40, 10, nprocs=2)
        # The ranks decide together every AGREE_EVERY steps: the first decision stops them.
        assert out_of_time["stopped"] == "time_budget"
        assert out_of_time["steps_this_session"] == kk.epochs.AGREE_EVERY
    finally:
        os.environ.pop("KAGGLEKIT_OUTPUT", None)


def test_an_explicit_argument_wins_over_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    run = _start(force_retrain=True)
    assert run.resume is False and run.config["force_retrain"] is True
    chosen = kk.fitoptions.Durability.of(None, run)
    assert chosen.resume is False and chosen.config == run.config  # the run decides
    own = kk.fitoptions.Durability.of(run.checkpoints("m", config={"lr": 1}, save_every_min=0.5), run)
    assert own.config == {"lr": 1}  # the checkpoints carry their training's config, and when to save
    assert own.save_every_min == 0.5 and kk.fitoptions.Durability.of("m", run).save_every_min == 20.0
    alone = kk.fitoptions.Durability.of(None, kk.Alone(resume=True, time_budget=5.0))
    assert alone.resume is True and alone.time_budget.remaining() <= 5.0
    with pytest.raises(TypeError, match="unexpected keyword argument 'epoch_limit'"):
        kk.fit(None, None, [1], None, epoch_limit=3)  # fit's options are explicit keywords
    with pytest.raises(ValueError, match="checkpoints='m' names a fit of the run: pass run=run"):
        kk.fitoptions.Durability.of("m", kk.Alone())


def _log_in_a_rank(run) -> None:
    run.log(loss=1.0)


def test_a_launched_rank_gets_the_run_and_may_not_write_its_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    run = _start()
    with pytest.raises(kk.launcher.LaunchError, match="run.log\\(\\) inside a launched process"):
        run.launch(_log_in_a_rank, nprocs=2)
    assert "loss" not in json.loads((tmp_path / "out" / "metrics.json").read_text())


def _count_walks_of(root: Path, monkeypatch) -> list:
    """Every os.scandir of a folder under ``root`` from now on (os.walk and pathlib use it)."""
    calls, real = [], os.scandir

    def counting(path="."):
        if str(path).startswith(str(root)):
            calls.append(str(path))
        return real(path)
    monkeypatch.setattr(os, "scandir", counting)
    return calls


def _lookups_in_a_rank(run, root: str) -> int:
    """In a launched rank: fit with checkpoints and a cache lookup; folders of the inputs read."""
    import pytest as _pytest
    with _pytest.MonkeyPatch.context() as mp:
        calls = _count_walks_of(Path(root), mp)
        _fit_with_run_defaults(run, steps=3)
        run.cache.get("x", {"a": 1}, lambda: 1)
    return len(calls)


@pytest.mark.slow
def test_a_hundred_thousand_input_files_are_walked_once_not_per_lookup(kaggle_tree, monkeypatch):
    competition = kaggle_tree / "input" / "competitions" / "big"
    for shard in range(100):
        folder = competition / "train" / f"{shard:03d}"
        folder.mkdir(parents=True)
        for i in range(1000):
            (folder / f"{i:05d}.tif").touch()
    previous = kaggle_tree / "input" / "notebooks" / "me" / "policy" / "checkpoints"
    previous.mkdir(parents=True)
    calls = _count_walks_of(kaggle_tree / "input", monkeypatch)
    run = _start()
    assert len(inputs.index([kaggle_tree / "input"])) > 100_000
    walked = len(calls)
    assert walked >= 100  # the one walk, at start
    for _ in range(3):  # checkpoint, cache and study lookups read the index
        _fit_with_run_defaults(run, steps=2)
        run.cache.get("y", {"b": 2}, lambda: 2)
        kk.studystore.adopt_previous(kaggle_tree / "working" / "s.db", "s")
    assert len(calls) == walked, f"{len(calls) - walked} folders of the inputs read again"
    # Launched ranks inherit the walked index: they do not walk either.
    assert run.launch(_lookups_in_a_rank, str(kaggle_tree / "input"), nprocs=2) == 0


@pytest.mark.parametrize("layout", ["datasets/ellipticco/elliptic-data-set", "elliptic-data-set"])
def test_data_dir_as_owner_slug_finds_the_attached_dataset_in_either_layout(tmp_path, layout,
                                                                            monkeypatch):
    root = tmp_path / "input"
    (root / layout / "elliptic_bitcoin_dataset").mkdir(parents=True)
    (root / "datasets" / "someone-else" / "other").mkdir(parents=True)
    monkeypatch.setenv("KAGGLEKIT_INPUT", str(root))
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    run = _start(data_dir="ellipticco/elliptic-data-set")
    assert run.data_dir() == root / layout
    # Another owner's dataset of that name is not this one (the flat layout has no owner).
    assert inputs.attached("someone-else/elliptic-data-set", [root]) == \
        (None if layout.startswith("datasets/") else root / layout)
    with pytest.raises(kk.context.DataDirError, match="not-attached.*dataset_sources"):
        _start(data_dir="ellipticco/not-attached")  # checked by kk.start, before any work


def _scratch_in_a_process(tmp_path, kill: bool) -> Path:
    """A notebook process making its scratch; ``kill``: it dies by SIGKILL, its exit handlers
    never run (what a kernel killed at shutdown leaves)."""
    script = f"""
import json, os, signal
import kagglekit as kk
run = kk.start(dict({DECLARED!r}), "policy", declared=dict({DECLARED!r}), verbose=False)
folder = run.scratch("cycles")
(folder / "save-20").write_bytes(b"x" * 1024)
assert run.scratch("cycles") == folder and (folder / "save-20").exists()  # one folder per session
print(json.dumps(str(folder)), flush=True)
if {kill!r}:
    os.kill(os.getpid(), signal.SIGKILL)
"""
    env = {**os.environ, "KAGGLEKIT_OUTPUT": str(tmp_path / "out"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == (-9 if kill else 0), done.stderr
    return Path(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_scratch_folder_is_there_for_the_run_and_gone_when_its_process_exits(tmp_path):
    """A study's savepoints are not outputs: a machine that keeps its temp folder (a CI runner,
    a laptop) must not fill up with them run after run."""
    folder = _scratch_in_a_process(tmp_path, kill=False)
    assert folder.is_relative_to(tmp_path / "tmp") and "policy" in folder.parent.name
    assert list((tmp_path / "tmp").iterdir()) == []
    killed = _scratch_in_a_process(tmp_path, kill=True)  # no exit handler ran: its scratch stays
    assert (killed / "save-20").exists()
    _scratch_in_a_process(tmp_path, kill=False)  # the next run's scratch takes the dead one's along
    assert list((tmp_path / "tmp").iterdir()) == []


def test_smoke_never_replaces_a_value_the_user_gave(tmp_path, monkeypatch, capsys):
    """`make run NB=tabular P="smoke=True folds=10"`: ten folds (the folder is named after them),
    the smoke's small amounts for the rest, and the kept value said."""
    import kagglekit as kk
    cell = "folds = 5  # [2, inf): folds\nrows = 3000  # [100, inf): rows\nsmoke = False  # CI\n"
    namespace = {"In": ["", cell, "# Parameters\nsmoke = True\nfolds = 10\n"], "folds": 10, "rows": 3000,
                 "smoke": True}
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path))
    run = kk.start(namespace, "t", smoke={"folds": 3, "rows": 600}, verbose=False)
    assert (run.config["folds"], run.config["rows"]) == (10, 600) and namespace["folds"] == 10
    assert "smoke run with your folds=10 (smoke alone: folds=3)" in capsys.readouterr().out


def test_data_dir_given_as_its_table_is_the_table_for_a_table_reader_and_its_folder_for_the_rest(tmp_path, monkeypatch,
                                                                                                capsys):
    """quickstart reads a table (data_dir may name one); a pipeline that reads a competition's folder gets the
    folder of the file named, said, instead of "does not exist"."""
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    folder = tmp_path / "comp"
    folder.mkdir()
    (folder / "train.csv").write_text("id,target\n1,0\n")
    (folder / "sample_submission.csv").write_text("id,target\n2,0\n")
    run = _start(data_dir=str(folder / "train.csv"))  # checked by kk.start: a table is there
    assert run.data_dir(table=True) == folder / "train.csv"
    assert run.data_dir(["sample_submission.csv"]) == folder
    assert f"is a file: reading the competition's folder {folder}" in capsys.readouterr().out
    with pytest.raises(kk.context.DataDirError, match="lacks test.csv"):
        run.data_dir(["test.csv"])
