"""Notebooks: committed clean, and each runs under papermill with smoke parameters."""
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from kagglekit.tools.notebook_runner import parse_overrides, run_notebook

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_clean(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), \
        "outputs or execution counts committed: clear them"
    tags = [c.get("metadata", {}).get("tags", []) for c in nb["cells"]]
    assert sum("parameters" in t for t in tags) == 1, "exactly one cell tagged 'parameters'"
    assert not any("injected-parameters" in t for t in tags)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"  # Kaggle runs it with papermill
    assert nb["cells"][0]["cell_type"] == "markdown", "start with a short markdown intro"


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def _outputs(executed: Path) -> list[tuple[int, dict]]:
    cells = json.loads(executed.read_text())["cells"]
    return [(i, o) for i, c in enumerate(cells) if c["cell_type"] == "code" for o in c["outputs"]]


def _text(output: dict) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else text


def assert_reads_as_a_report(out: Path, name: str) -> None:
    """The executed notebook is the report: every saved figure inline, the summary as an
    HTML table in the last cell, nothing on stderr."""
    import base64
    executed = out / f"{name}.ipynb"
    outputs = _outputs(executed)
    inline = {base64.b64decode("".join(o["data"]["image/png"]))
              for _, o in outputs if "image/png" in o.get("data", {})}
    saved = sorted(out.glob("*.png"))
    assert saved and all(p.read_bytes() in inline for p in saved), \
        [p.name for p in saved if p.read_bytes() not in inline]
    last = max(i for i, _ in outputs)
    assert any("<table" in "".join(o.get("data", {}).get("text/html", "")) for i, o in outputs
               if i == last), "the summary cell shows no HTML table"
    results = ["".join(o["data"].get("text/plain", "")) for _, o in outputs
               if o["output_type"] == "execute_result"]
    assert not results, f"a value shown as its repr: {results}"
    stderr = [_text(o) for _, o in outputs if o.get("name") == "stderr"]
    assert not stderr, stderr


# The notebooks that no other test of `make test` runs: each is judged on its scores in `make test-e2e`, and
# here only run through at its smoke size, so that `make test` alone catches a kit change that breaks one.
RUN_NOWHERE_ELSE_IN_MAKE_TEST = ("blend", "image_classification", "text_generation")  # audio: tests/test_audio.py


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN_NOWHERE_ELSE_IN_MAKE_TEST)
def test_a_notebook_runs_through_at_its_smoke_size_and_reads_as_a_report(tmp_path, name):
    """Every summary line with a value, a checked submission, every plot inline, nothing on stderr
    (a reader's warning the notebook also says as a note is one line too many)."""
    out = run_notebook(REPO / "notebooks" / f"{name}.ipynb", {"smoke": True}, output_dir=tmp_path / name,
                       progress=False)
    metrics = _metrics(out)
    assert metrics["summary"] and all(line["value"] is not None for line in metrics["summary"]), metrics["summary"]
    assert (out / "submission.csv").exists() and metrics["submission"]
    assert_reads_as_a_report(out, name)


@pytest.mark.slow
def test_quickstart_trains_then_more_epochs_train_on_in_the_same_folder(tmp_path):
    """``make run NB=quickstart P=epochs=1``, then 2, then 4: one folder (epochs is run control),
    and each longer run trains on from where the last one ended."""
    from kagglekit.tools.notebook_runner import run_folder
    notebook, small = REPO / "notebooks" / "quickstart.ipynb", {"samples": 1024}
    folders = {run_folder(notebook, {**small, "epochs": e}, tmp_path) for e in (1, 2, 4)}
    assert len(folders) == 1  # epochs is marked [run] in the parameters cell: one run, one folder
    runs = []
    for epochs, extra in ((1, {}), (2, {}), (4, {"cuda_graphs": "auto"}), (4, {})):
        out = run_notebook(notebook, {**small, "epochs": epochs, **extra}, output_root=tmp_path,
                           progress=False)
        runs.append(_metrics(out)["fit"])
    per_epoch = runs[0]["steps"]
    assert runs[0]["stopped"] == "completed" and per_epoch == 819 // 64  # one epoch of batches
    assert [(r["steps_this_session"], r["steps"], r["epochs"]) for r in runs[1:3]] == \
        [(per_epoch, 2 * per_epoch, 2), (2 * per_epoch, 4 * per_epoch, 4)]
    # OneCycleLR depends on the run's length: the extension says the longer run differs from an
    # uninterrupted one (tests/test_length.py shows the bit-equal case, a length-free schedule).
    assert "OneCycleLR depends on the run's length" in runs[2]["extended"]
    last = runs[3]  # the same length again: skipped, with the figures of the run that trained
    assert last["stopped"] == "already_complete" and last["steps_this_session"] == 0
    assert last["skipped_rerun"] and last["samples_per_s"] == runs[2]["samples_per_s"] > 0
    metrics = _metrics(out)
    assert metrics["chain"] == {"fit": "skipped"} and metrics["summary"][0]["passed"]
    assert metrics["fit"]["history"][-1]["epoch"] == 3 and len(metrics["fit"]["history"]) == 4
    fit = runs[2]
    assert fit["step_breakdown"]["sampled_steps"] >= 1  # one step in 25 is timed
    if not metrics["env"]["gpus"]:
        assert fit["diagnosis"]["device"] == "cpu" and "no GPU" in fit["diagnosis"]["text"]
    assert (out / "fit_step_time.png").exists() and (out / "fit_learning_curves.png").exists()
    assert_reads_as_a_report(out, "quickstart")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_mistyped_parameter_fails_before_a_kernel_starts_naming_it(tmp_path, path):
    from kagglekit.run.params import ParameterError, assignments
    cells = json.loads(path.read_text())["cells"]
    source = next(c["source"] for c in cells if "parameters" in c["metadata"].get("tags", []))
    name = next(iter(assignments("".join(source))))
    typo = name[1] + name[0] + name[2:]  # two letters swapped, as fingers do
    with pytest.raises(ParameterError, match=f"did you mean '{name}'"):
        run_notebook(path, {typo: 1}, output_root=tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists()  # checked from the file: no kernel, no folder


@pytest.mark.slow
def test_run_by_papermill_directly_a_typo_still_fails_in_the_first_cell(tmp_path):
    import papermill

    from kagglekit.tools.notebook_runner import _venv_kernel_env
    _venv_kernel_env()  # the venv's "python3" kernel, as make run uses
    with pytest.raises(papermill.PapermillExecutionError, match="did you mean 'epochs'"):
        papermill.execute_notebook(str(REPO / "notebooks" / "quickstart.ipynb"),
                                   str(tmp_path / "q.ipynb"), parameters={"epcohs": 1},
                                   kernel_name="python3", progress_bar=False, cwd=str(tmp_path))


@pytest.mark.parametrize("given,said", [
    ("epcohs=3", "unknown parameter 'epcohs' (did you mean 'epochs'?)"),
    ("precision=fp61", "parameter 'precision' = 'fp61' is not one of its choices (did you mean 'fp16'? "
                       "choose from auto | fp32 | fp16 | bf16)")])
def test_the_cli_prints_a_bad_parameter_as_one_line_and_starts_nothing(tmp_path, given, said):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", "quickstart", "-p",
                           given, "--output", str(tmp_path / "runs")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not (tmp_path / "runs").exists()
    assert done.stderr.strip().splitlines() == [
        f"error: {said}. Fix it in make run P=\"NAME=VALUE ...\" (papermill: -p NAME VALUE) or in the kernel "
        "metadata's parameters."]


def write_playground_folder(folder: Path, rows: int = 1500) -> None:
    """A tabular competition's folder as Kaggle's Playground Series ship it: train.csv with an
    ``id`` column, numeric columns with gaps, a text category with a gap, a free-text column,
    the target as words; test.csv (its ids continuing train's, gaps too, a category train never
    had) and sample_submission.csv (id and the target, one placeholder word) beside it."""
    import pandas as pd
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4))
    color = rng.choice(["red", "green", "blue"], size=rows)
    score = x[:, 0] + x[:, 1] * x[:, 2] + (color == "red") * 1.5
    frame = pd.DataFrame({"id": np.arange(rows), **{f"f{i}": x[:, i] for i in range(4)},
                          "color": color, "note": [f"free text {i}" for i in range(rows)],
                          "Status": np.where(score > 0.5, "approved", "declined")})
    frame.loc[rng.random(rows) < 0.05, "f1"] = np.nan
    frame.loc[rng.random(rows) < 0.05, "color"] = None
    folder.mkdir(parents=True)
    frame.to_csv(folder / "train.csv", index=False)
    test = frame.drop(columns="Status").head(10).copy()
    test["id"] = np.arange(rows, rows + 10)
    test.loc[3, "color"], test.loc[4, "f2"] = "purple", np.nan
    test.to_csv(folder / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "Status": "approved"}).to_csv(folder / "sample_submission.csv", index=False)


@pytest.mark.slow
def test_quickstart_reads_a_tabular_competitions_train_csv_through_data_dir(tmp_path):
    import pandas as pd
    write_playground_folder(tmp_path / "playground")
    out = run_notebook(REPO / "notebooks" / "quickstart.ipynb",
                       {"data_dir": str(tmp_path / "playground"), "target_column": "Status", "epochs": 6},
                       output_dir=tmp_path / "q", progress=False)
    m = _metrics(out)
    accuracy = m["summary"][0]
    assert accuracy["passed"] and accuracy["value"] > accuracy["baseline"] + 0.1, accuracy
    executed = "".join(_text(o) for _, o in _outputs(out / "quickstart.ipynb"))
    # four numeric columns and color one-hot: red, green, blue and its gap
    assert "train.csv: 1,500 rows, 8 features, classes ['approved', 'declined']" in executed
    assert "note: column 'id' not used: a row id" in executed  # said on the way, and beside the results:
    assert m["notes"] == ["column 'id' not used: a row id", "column 'note' not used: 1500 distinct values: free text, "
                          "not categories"]
    submission = pd.read_csv(out / "submission.csv")  # test.csv through train's preprocessing
    assert list(submission.columns) == ["id", "Status"] and submission["id"].tolist() == list(range(1500, 1510))
    assert set(submission["Status"]) <= {"approved", "declined"} and m["submission"]["rows"] == 10
    truth = np.where(pd.read_csv(tmp_path / "playground" / "train.csv")["Status"].head(10) == "approved", 1, 0)
    assert (np.where(submission["Status"] == "approved", 1, 0) == truth).mean() >= 0.7


def test_a_missing_data_dir_fails_with_its_name_before_a_kernel(tmp_path):
    from kagglekit.run.paths import PathError
    with pytest.raises(PathError, match="data_dir='/no/such/folder' does not exist"):
        run_notebook(REPO / "notebooks" / "quickstart.ipynb", {"data_dir": "/no/such/folder"},
                     output_dir=tmp_path / "q", progress=False)
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_starts_with_kk_start_which_checks_data_dir_before_any_work(path, monkeypatch,
                                                                                  tmp_path):
    """kk.start checks data_dir (the test above sees its message end to end); every notebook
    calls it in its first cell after the parameters, before it reads or trains anything."""
    import kagglekit as kk
    from kagglekit.run.context import DataDirError
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert "parameters" in cells[0]["metadata"].get("tags", [])
    assert f'kk.start(globals(), "{path.stem}"' in "".join(cells[1]["source"])
    namespace: dict = {}
    exec("".join(cells[0]["source"]), namespace)
    declared = {k: v for k, v in namespace.items() if not k.startswith("__")}
    namespace["data_dir"] = "/no/such/folder"
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path))
    with pytest.raises(DataDirError, match="data_dir='/no/such/folder' does not exist"):
        kk.start(namespace, path.stem, declared=declared, verbose=False)


@pytest.mark.slow
def test_a_data_dir_without_the_expected_files_says_which(tmp_path):
    import papermill
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(papermill.PapermillExecutionError, match=r"lacks train\.csv, test\.csv: this pipeline needs"):
        run_notebook(REPO / "notebooks" / "segmentation_3d.ipynb", {"data_dir": str(empty)},
                     output_dir=tmp_path / "out", progress=False)


def test_overrides_parse_like_python_literals():
    assert parse_overrides(["epochs=3", "lr=1e-3", "smoke=True", "data_dir=/x/y"]) == \
        {"epochs": 3, "lr": 1e-3, "smoke": True, "data_dir": "/x/y"}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_overrides(["epochs"])


def _finite_numbers(obj) -> bool:
    if isinstance(obj, dict):
        return all(_finite_numbers(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite_numbers(v) for v in obj)
    return not isinstance(obj, float) or math.isfinite(obj)


@pytest.mark.slow
@pytest.mark.e2e
def test_sequence_models_on_its_defaults_ranks_the_sequence_models_above_the_mlp(tmp_path):
    """The built-in task needs order: reading in order (LSTM) or comparing positions
    (Transformer) beats an MLP on the flattened sequence, by a margin."""
    out = run_notebook(REPO / "notebooks" / "sequence_models.ipynb", {}, output_dir=tmp_path / "seq",
                       progress=False)
    m = _metrics(out)
    assert [r["model"] for r in m["models"]] == ["lstm", "transformer", "mlp"]
    for row in m["models"]:
        assert row["samples_per_s"] > 0 and 0 <= row["val_acc"] <= 1 and row["params"] > 0
        assert row["stopped"] == "completed"
    acc = {r["model"]: r["val_acc"] for r in m["models"]}
    assert min(acc["lstm"], acc["transformer"]) > acc["mlp"] + 0.1, acc
    assert m["summary"][0]["passed"] and _finite_numbers(m)
    for png in ("models.png", "fit_lstm_learning_curves.png", "step_time.png", "sequence_models.ipynb"):
        assert (out / png).exists()
    assert_reads_as_a_report(out, "sequence_models")


def _tree_bytes(folder: Path) -> dict:
    import hashlib
    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _zip_masks(path: Path) -> dict:
    import io
    import zipfile

    import tifffile
    with zipfile.ZipFile(path) as zf:
        return {n[:-4]: tifffile.imread(io.BytesIO(zf.read(n))) for n in zf.namelist()}


@pytest.mark.slow
@pytest.mark.e2e
def test_segmentation_3d_on_the_competition_layout_then_inference_only_on_new_test_volumes(tmp_path):
    """Training on the competition's files as they ship (LZW stacks, ids moved to deprecated_*,
    two shapes, label 2, one public test volume: tools/standins.py) with two DDP processes;
    then another test_images/ predicted by both processes without a training step and without
    a byte of the checkpoints changing."""
    from kagglekit import volumes
    from kagglekit.tools import standins
    comp = standins.vesuvius(tmp_path / "comp", shrink=4)
    nb = REPO / "notebooks" / "segmentation_3d.ipynb"
    params = {"smoke": True, "processes": 2, "data_dir": str(comp)}
    out = run_notebook(nb, params, output_dir=tmp_path / "seg", progress=False)
    m = _metrics(out)
    assert m["fit"]["world_size"] == 2 and m["fit"]["stopped"] == "completed"
    assert m["val_dice"] > m["val_dice_threshold_baseline"]  # the 3-D shape matters, not brightness
    assert m["val_score"] > m["val_score_threshold_baseline"]  # and so on the leaderboard's own score
    assert m["val_score"] == pytest.approx(m["postprocess"]["score"])  # the choice, scored as chosen
    assert all("val_score" in epoch for epoch in m["fit"]["history"])  # what picks the best checkpoint
    assert _finite_numbers(m) and m["effective_batch"] == 2 * 2 * 2
    assert sorted(m["data"]["skipped"]) == sorted(v for v, _, _ in standins.MOVED)  # named, once
    printed = "".join(_text(o) for _, o in _outputs(out / "segmentation_3d.ipynb"))
    assert printed.count("2 of 6 ids in train.csv skipped") == 1
    decoded = sorted(p.name.rsplit("-", 1)[0] for p in (out / "cache" / "volumes").glob("*.npy"))
    assert len(decoded) == len(set(decoded)) + 4  # 4 volumes decoded as image and label once each
    masks = _zip_masks(out / "submission.zip")
    assert sorted(masks) == ["1407735"]
    for vid, mask in masks.items():
        source = volumes.TiffVolume(comp / "test_images" / f"{vid}.tif")  # LZW: read by Pillow
        assert mask.shape == source.shape and mask.dtype == np.uint8 and mask.max() <= 1
    assert (out / "slices.png").exists() and (out / "fit_learning_curves.png").exists()
    assert_reads_as_a_report(out, "segmentation_3d")

    trained = _tree_bytes(out / "checkpoints")
    other = volumes.write_synthetic(tmp_path / "other", [], [40, 24, 24], seed=2, prefix="new")
    again = _metrics(run_notebook(nb, {**params, "test_dir": str(other)}, output_dir=out, progress=False))
    assert again["chain"]["cache:unet3d"] == "hit"  # the finished training's unit: nothing launched
    assert again["chain"]["cache:postprocess"] == "hit" and again["postprocess"] == m["postprocess"]
    assert _tree_bytes(out / "checkpoints") == trained  # read, never written
    masks = _zip_masks(out / "submission.zip")
    assert sorted(masks) == ["newtest000", "newtest001", "newtest002"]
    assert masks["newtest000"].shape == (40, 40, 40)
    ranks = [(out / "logs" / f"rank{r}.log").read_text() for r in (0, 1)]
    assert all("test volume newtest" in log for log in ranks)  # both processes predicted


@pytest.mark.slow
def test_segmentation_3d_killed_mid_training_resumes_when_run_again(tmp_path):
    import json
    import re
    import subprocess
    import sys
    import time

    from processes import kill_tree

    from kagglekit.tools.notebook_runner import run_folder
    # smoke's sizes, but not smoke: smoke would replace epochs with its own 2 (16 steps, a second); two
    # validation volumes, of which the resumed run predicts and scores one
    small = {"volumes": 4, "test_volumes": 2, "size": 24, "patch": 16, "patches_per_epoch": 32, "batch_size": 2,
             "val_fraction": 0.5}
    out = tmp_path / "runs"
    notebook = REPO / "notebooks" / "segmentation_3d.ipynb"
    killed = {**small, "epochs": 40, "save_every_min": 0.0}  # 320 steps, a checkpoint after each
    folder = run_folder(notebook, killed, out)
    ckpts = folder / "checkpoints" / "unet3d"
    cmd = [sys.executable, "-m", "kagglekit.tools.cli", "run", "segmentation_3d", "--output", str(out),
           *[arg for k, v in killed.items() for arg in ("-p", f"{k}={v}")]]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(ckpts.rglob("step-*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    kill_tree(proc)  # papermill, the kernel (a session of its own) and its ranks
    sidecars = [json.loads(p.read_text()) for p in ckpts.rglob("step-*.json")]
    assert sidecars and not any(s["final"] for s in sidecars), "the run finished before it was killed"
    killed_at = max(s["step"] for s in sidecars)
    again = run_notebook(notebook, {**small, "epochs": 3, "scored_volumes": 1}, output_dir=folder, progress=False)
    m = _metrics(again)
    fit = m["fit"]
    assert fit["resumed_from"] and re.search(r"checkpoints/unet3d/[0-9a-f]{16}/step-", fit["resumed_from"])
    assert fit["steps"] - fit["steps_this_session"] >= killed_at
    # of the two validation volumes only the scored one is predicted (Kaggle's split holds about 200)
    assert m["data"]["val"] == 2 and m["predicted"]["val"] == 1 and len(m["val_scores"]) == 1
    assert [p.stem for p in (again / "probabilities" / "val").glob("*.tif")] == [m["val_scores"][0]["volume"]]


def _check_the_forecast_past_the_end(out: Path, table: Path, horizon: int) -> None:
    """submission.csv: horizon rows per series, the first dated one step (a day here) after
    each series' own last date, every value finite."""
    import pandas as pd
    data = pd.read_parquet(table).assign(date=lambda f: pd.to_datetime(f["date"]))
    sub = pd.read_csv(out / "submission.csv", parse_dates=["date"])
    assert list(sub.columns) == ["store", "date", "sales"] and np.isfinite(sub["sales"]).all()
    assert sub.groupby("store").size().to_dict() == {s: horizon for s in data["store"].unique()}
    last = data.groupby("store")["date"].max()
    first = sub.groupby("store")["date"].min()
    assert (first - last == pd.Timedelta(days=1)).all()
    assert (sub.groupby("store")["date"].max() - last == pd.Timedelta(days=horizon)).all()
    assert _metrics(out)["submission"]["rows"] == len(sub) == 3 * horizon


@pytest.mark.slow
@pytest.mark.e2e
def test_timeseries_on_a_long_table_rerun_hits_every_model_and_one_change_retrains_one(tmp_path):
    """A Parquet table in the layout of a forecasting competition (three stores of different
    lengths and starts, dates as text, gaps in a feature) through data_dir; a rerun trains
    nothing; changing one model's parameter retrains that model only."""
    from test_timeseries import write_long_table
    write_long_table(tmp_path / "data", suffix=".parquet")
    path = REPO / "notebooks" / "timeseries_forecast.ipynb"
    params = {"smoke": True, "data_dir": str(tmp_path / "data"), "time_column": "date",
              "target_column": "sales", "feature_columns": "promo", "series_column": "store",
              "period": 7}
    models = {"xgboost", "lightgbm", "lstm", "lstm_tuned"}
    out = run_notebook(path, params, output_dir=tmp_path / "ts", progress=False)
    first = _metrics(out)
    fold = {f"{m}-fold0" for m in models} | {"forecast-fold0"}  # each model, and the fold
    assert {e["name"] for e in first["cache"]["entries"] if not e["hit"]} == fold
    rows = {r["model"]: r for r in first["models"]}
    assert set(rows) == models | {"seasonal_naive", "ensemble"}
    assert _finite_numbers(first) and all(r["mae"] > 0 for r in rows.values())
    assert first["cuts"][0].startswith("2024-") and all(n > 0 for n in first["windows"].values())
    assert abs(sum(first["ensemble_weights"].values()) - 1) < 1e-6
    for model in ("xgboost", "lightgbm", "lstm"):  # each search ran its total
        trials = first[f"search_{model}"]["trials"]
        assert trials.get("COMPLETE", 0) + trials.get("PRUNED", 0) == 2
    assert list((out / "cache" / "lightgbm-fold0").rglob("value.txt"))  # text, not pickle
    for png in ("forecast.png", "models.png", "fit_lstm_learning_curves.png", "future.png"):
        assert (out / png).exists()
    assert_reads_as_a_report(out, "timeseries_forecast")
    _check_the_forecast_past_the_end(out, tmp_path / "data" / "train.parquet", first["config"]["horizon"])
    stamps = {p: p.stat().st_mtime_ns for p in [*(out / "checkpoints").rglob("step-*"),
                                                 *(out / "tune").glob("*.db")]}
    assert len([p for p in stamps if p.suffix == ".db"]) == 3

    second = _metrics(run_notebook(path, params, output_dir=out, progress=False))
    assert (second["cache"]["hits"], second["cache"]["misses"]) == (1, 0)  # the fold, whole
    assert second["cache"]["seconds_saved"] > 0
    assert [r["mae"] for r in second["models"]] == [r["mae"] for r in first["models"]]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # no training step, no new trial

    changed = _metrics(run_notebook(path, {**params, "lgb_rounds": 150}, output_dir=out,
                                    progress=False))
    assert {e["name"] for e in changed["cache"]["entries"] if not e["hit"]} == {"lightgbm-fold0",
                                                                              "forecast-fold0"}
    kept = {r["model"]: (r["mae"], r["cached"]) for r in changed["models"]}
    assert kept["lstm"] == (rows["lstm"]["mae"], True) and kept["xgboost"] == (rows["xgboost"]["mae"], True)


@pytest.mark.slow
@pytest.mark.e2e
def test_timeseries_folds_validate_later_than_they_train_and_finish_in_the_next_version(tmp_path):
    """folds=3 with two folds per version: the first run trains folds 0-1 and reports no score,
    the second trains fold 2 only (0-1 are hits) and then writes the OOF forecasts (every window
    forecast by the fold that held it out, each fold validating on windows later than all of its
    training windows) and the ensemble, whose weights are fitted on them."""
    import pandas as pd
    from test_timeseries import write_long_table
    write_long_table(tmp_path / "data", suffix=".parquet")
    path = REPO / "notebooks" / "timeseries_forecast.ipynb"
    params = {"smoke": True, "data_dir": str(tmp_path / "data"), "time_column": "date",
              "target_column": "sales", "feature_columns": "promo", "series_column": "store",
              "period": 7, "folds": 3, "folds_per_version": 2}
    out = run_notebook(path, params, output_dir=tmp_path / "ts", progress=False)
    first = _metrics(out)
    assert (first["cv_forecast"]["done"], first["cv_forecast"]["pending"]) == ([0, 1], [2])
    assert first["summary"][0]["value"] is None and not (out / "oof.parquet").exists()
    assert "folds 0-1 of 3 done, 2 next version" in first["summary"][0]["result"]

    second = _metrics(run_notebook(path, params, output_dir=out, progress=False))
    folds = {e["name"]: e["hit"] for e in second["cache"]["entries"] if e["name"].startswith("forecast-fold")}
    assert folds == {"forecast-fold0": True, "forecast-fold1": True, "forecast-fold2": False}
    cv = second["cv_forecast"]
    assert cv["pending"] == [] and set(cv["scores"]) == {"lstm", "lstm_tuned", "xgboost", "lightgbm"}
    assert all(len(s["per_fold"]) == 3 and s["oof"] > 0 for s in cv["scores"].values())
    oof = pd.read_parquet(out / "oof.parquet")
    assert set(oof.columns) == {"id", "step", "fold", "target", "lstm", "lstm_tuned", "xgboost", "lightgbm", "ensemble"}
    assert sorted(oof["fold"].unique()) == [0, 1, 2] and oof.groupby("id").size().eq(12).all()
    when = pd.to_datetime(oof["id"].str.split("|").str[1])
    for k in (1, 2):  # a fold's first validated origin is after every origin it trained on
        assert when[oof["fold"] == k].min() > when[oof["fold"] == k - 1].max()
    assert abs(sum(second["ensemble_weights"].values()) - 1) < 1e-6
    assert pd.read_csv(out / "submission.csv")["sales"].notna().all()
    assert second["submission"]["model"] == "ensemble"  # what a blend of kernels reads
    assert second["summary"][0]["value"] > 0
    cv_lines = {h["result"].split(")")[0]: h["value"] for h in second["summary"] if h["result"].startswith("CV")}
    assert cv_lines == {f"CV MAE ({m}": s["mean"] for m, s in cv["scores"].items()}


@pytest.mark.slow
def test_gpu_utilization_measures_each_strategy_and_says_what_it_skipped(tmp_path, monkeypatch):
    temp = Path(tempfile.mkdtemp(prefix="kkgu-"))  # short: AF_UNIX socket paths stop at 108 bytes
    monkeypatch.setenv("TMPDIR", str(temp))  # the kernel's temp folder
    try:
        out = run_notebook(REPO / "notebooks" / "gpu_utilization.ipynb", {"smoke": True},
                           output_dir=tmp_path / "gpu", progress=False)
        assert not list(temp.glob("kagglekit-scratch-*"))  # the savepoints went with the kernel
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    m = _metrics(out)
    measured = {r["strategy"]: r for r in m["strategies"]}
    import torch
    expected = {"sync", "batched", "process_pool"} | ({"cuda_graph"} if torch.cuda.is_available() else set())
    assert set(measured) == expected and all(r["cycles_per_s"] > 0 for r in measured.values())
    if not torch.cuda.is_available():
        assert "CUDA graphs need CUDA tensors" in m["skipped"]["cuda_graph"]
    else:  # the smoke run's 60 cycles at 50 per graph: one replay, 10 cycles eagerly
        assert m["graphs"] == {"graph_cycles": 50, "replays": 1, "eager_cycles": 10}
    pool = m["pool"]["process_pool"]  # sized by a measured cycle, never past the cores less one
    import os
    assert 1 <= pool["workers"] <= max(1, len(os.sched_getaffinity(0)) - 1) and "needs" in pool["why"]
    # Real memory (RSS on CPU): 60 results of 256 x 256 floats held = 15.7 MB, at most 20 (5.2 MB)
    # with savepoints. The smoke run's results are 256 KB each so that what they hold dwarfs the
    # megabyte or so the process allocates besides (the first torch.save, the pool's threads):
    # at 64 rows the two were alike and the ratio below failed now and then.
    peaks = m["memory_peak_mb"]
    held = 60 * 256 * 256 * 4 / 2**20  # MB of every result; savepoints keep a third at most
    assert peaks["without savepoints"] > 0.9 * held
    # What the process allocates besides varies from run to run (4 to 15 MB measured) and is the
    # same in both runs: the difference is what the savepoints freed (measured 9.5 to 18 MB).
    assert peaks["without savepoints"] - peaks["savepoints every 20"] > 0.5 * (held - held / 3)
    assert m["memory_unit"] == ("CUDA allocated" if torch.cuda.is_available() else "resident (RSS)")
    eager, graphed = m["fit_cuda_graphs"]
    assert eager["cuda_graphs"] == "off" and eager["steps_per_s"] > 0
    if torch.cuda.is_available():
        assert graphed["status"].startswith("cuda graph: 20 of 20")
    else:
        assert graphed["skipped"] == "CUDA graphs need a CUDA device"
    for name, r in measured.items():  # each verdict follows from that strategy's own numbers
        inputs = m["diagnosis_inputs"][name]
        if not torch.cuda.is_available():  # the CPU part of a cycle is its "data wait"
            cpu_share = inputs["breakdown"]["fraction"]["data_wait"]
            assert r["verdict"] == ("input-bound" if cpu_share >= 0.3 else "cpu-only"), (name, r)
            assert 0 < cpu_share < 1 and m["advice"][name]
    for png in ("strategies.png", "breakdown.png", "memory.png"):
        assert (out / png).exists()
    assert_reads_as_a_report(out, "gpu_utilization")


@pytest.mark.slow
def test_a_training_of_200_steps_under_papermill_leaves_a_few_progress_lines(tmp_path):
    out = run_notebook(REPO / "notebooks" / "quickstart.ipynb", {"epochs": 2, "samples": 8192},
                       output_dir=tmp_path / "q", progress=False)
    assert _metrics(out)["fit"]["steps"] >= 200
    lines = [line for _, o in _outputs(out / "quickstart.ipynb") for line in _text(o).splitlines()]
    progress = [line for line in lines if line.startswith("train:")]
    assert 1 <= len(progress) <= 5, progress  # a line per epoch at most, never one per refresh
    assert len(lines) <= 40
