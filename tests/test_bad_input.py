"""Bad input is refused before any work, in one line that names the input and the fix: a property
over every parameter of every notebook, each fed a value of the wrong type, one outside what its
comment declares (its interval, choices or members), an empty required value and a path that
names nothing, through `make run`'s own command; and the data's content where the kit reads it."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kagglekit.run import contract
from kagglekit.tools import cli
from kagglekit.tools.notebook_runner import parameters_source

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))


def wrong_values(declared: contract.Declared) -> dict[str, object]:
    """What a user could mistype for one parameter, by what is wrong with it."""
    default, bad = declared.default, {}
    bad["type"] = "yes" if isinstance(default, bool) else "many" if isinstance(default, (int, float)) else 3
    bounds = declared.range
    if bounds is not None and not (declared.members or declared.integers):
        step = 1 if isinstance(default, int) else 0.5
        bad["range"] = bounds.low - (0 if bounds.low_open else step) if math.isfinite(bounds.low) \
            else bounds.high + (0 if bounds.high_open else step)
        bad["range"] = type(default)(bad["range"])
    if declared.choices:
        bad["choice"] = 99 if isinstance(default, int) else declared.choices[0].upper() + "x"
    if declared.members or declared.integers:
        bad["member"] = f"{default},{'nosuch' if declared.members else 'x'}"
    if declared.required:
        bad["empty"] = ""
    if declared.path:
        bad["path"] = "/no/such/place"
    return bad


def test_every_numeric_parameter_declares_its_interval_or_choices_and_every_default_passes():
    for notebook in NOTEBOOKS:
        declared = contract.declarations(parameters_source(REPO / "notebooks" / f"{notebook}.ipynb"))
        for name, d in declared.items():
            number = isinstance(d.default, (int, float)) and not isinstance(d.default, bool)
            assert not number or d.range is not None or d.choices, f"{notebook}: {name} declares no interval"
            assert d.problem(d.default) is None, f"{notebook}: {name}'s own default is refused"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_wrong_value_of_every_parameter_is_refused_in_one_line_before_a_kernel(notebook, tmp_path, capsys,
                                                                                     monkeypatch):
    monkeypatch.chdir(REPO)  # make run's working folder: notebooks/ and data/ are found from there
    from kagglekit.tools import notebook_runner

    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel would start")
    monkeypatch.setattr(notebook_runner, "run_notebook", no_kernel)
    declared = contract.declarations(parameters_source(REPO / "notebooks" / f"{notebook}.ipynb"))
    cases = 0
    for name, d in declared.items():
        for kind, value in wrong_values(d).items():
            out = tmp_path / "runs"
            code = cli.main(["run", notebook, "-p", f"{name}={value!r}", "--output", str(out)])
            said = capsys.readouterr().err.strip().splitlines()
            assert code == 2 and len(said) == 1, (name, kind, value, said)
            assert said[0].startswith("error: ") and (repr(name) in said[0] or f"{name}=" in said[0]), said
            assert not out.exists(), f"{notebook}: {name}={value!r} ({kind}) made a run folder"
            cases += 1
    assert cases >= 3 * len(declared) // 2  # most parameters are tried more than one way


def test_a_refusal_names_the_fix_the_cli_takes_and_a_choice_in_another_case():
    said = contract.problems(parameters_source(REPO / "notebooks" / "tabular.ipynb"), {"metric": "AUC"})
    assert said == ["parameter 'metric' = 'AUC' is not one of its choices (did you mean 'auc'? choose from "
                    "auc | logloss | accuracy | rmse | rmsle | mae | r2 | map@3)"]


def _model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_model_dir_with_two_models_or_none_is_refused_naming_them(tmp_path):
    """A folder holding several models side by side (or a temp folder with a test's stand-in deep
    below) is not a guess to make; versions of one Kaggle Model (<N>/) take the newest."""
    from kagglekit.run import paths
    two = tmp_path / "two"
    first, second = _model(two / "bert-base"), _model(two / "deberta-v3")
    with pytest.raises(paths.PathError, match=r"holds 2 models: .*bert-base, .*deberta-v3\. Name the one"):
        paths.find("model_dir", str(two), [])
    empty = tmp_path / "none"
    _model(empty / "a" / "b" / "c" / "d")  # four folders down: deeper than a mount puts a model
    with pytest.raises(paths.PathError, match=r"no config\.json in .*none or up to 3 folders below"):
        paths.find("model_dir", str(empty), [])
    handle = tmp_path / "input" / "models" / "google" / "bert" / "transformers" / "base"
    _model(handle / "1"), _model(handle / "2")
    assert paths.find("model_dir", "google/bert/transformers/base", [tmp_path / "input"]) == handle / "2"
    assert paths.find("model_dir", str(first), []) == first and second.exists()


def test_a_missing_path_parameter_stops_kk_start_naming_it(tmp_path, monkeypatch):
    import kagglekit as kk
    source = parameters_source(REPO / "notebooks" / "tabular.ipynb")
    namespace = {"In": ["", source, "# Parameters\noriginal_csv = '/no/such/original.csv'\n"]}
    exec(source, namespace)
    namespace["original_csv"] = "/no/such/original.csv"
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path))
    with pytest.raises(kk.paths.PathError, match=r"original_csv='/no/such/original\.csv' does not exist"):
        kk.start(namespace, "tabular", verbose=False)


def test_test_csv_spelling_a_column_otherwise_is_read_under_trains_name_and_said(tmp_path):
    """Playground data as users meet it: test.csv's ``F1`` is train.csv's ``f1``. Read as the same
    feature (a model without it scored 0.58 CV instead of 0.94) and named; a column test.csv lacks
    is named too."""
    from kagglekit.tables import competition
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"id": range(200), "f1": rng.normal(size=200), "extra": 1.0,
                          "target": rng.integers(0, 2, 200)})
    train.to_csv(tmp_path / "train.csv", index=False)
    train.drop(columns=["target", "extra"]).rename(columns={"f1": "F1"}).assign(id=range(200, 400)).to_csv(
        tmp_path / "test.csv", index=False)
    pd.DataFrame({"id": range(200, 400), "target": 0}).to_csv(tmp_path / "sample_submission.csv", index=False)
    comp = competition.read(tmp_path, classification=True)
    assert list(comp.test.columns) == ["f1"] and comp.test["f1"].notna().all()
    assert comp.notes() == ["column 'extra' not used: not in test.csv",
                            "test.csv's 'F1' read as train.csv's 'f1' (the names differ in case or spaces)"]


def test_a_target_of_measurements_is_refused_for_a_classification_metric_and_by_quickstart(tmp_path):
    from kagglekit.tables import competition, folder as tables
    from kagglekit.tables.timeseries import TableError
    rng = np.random.default_rng(0)
    yields = np.round(rng.normal(50, 10, 300), 2)  # a crop yield: 2 decimals
    pd.DataFrame({"id": range(300), "x": rng.normal(size=300), "yield": yields}).to_csv(tmp_path / "train.csv",
                                                                                         index=False)
    pd.DataFrame({"id": range(300, 310), "x": 0.0}).to_csv(tmp_path / "test.csv", index=False)
    pd.DataFrame({"id": range(300, 310), "yield": 0.0}).to_csv(tmp_path / "sample_submission.csv", index=False)
    with pytest.raises(TableError, match=r"'yield' holds \d+ distinct numbers .* with fractions: a measurement, "
                                         r"but the metric scores classes\. Name the competition's metric"):
        competition.read(tmp_path, classification=True)
    assert competition.read(tmp_path, classification=False).y.dtype == np.float64  # rmse reads it
    with pytest.raises(TableError, match=r"train\.csv: the target 'yield' holds .* this notebook classifies"):
        tables.read_labelled(tmp_path, "yield")


def test_a_csv_separated_otherwise_is_read_and_said_and_an_empty_one_is_named(tmp_path, capsys):
    from kagglekit.readers import csvfile
    (tmp_path / "euro.csv").write_text("id;price;city\n1;2,5;Lyon\n2;3,0;Nice\n")
    frame = csvfile.read(tmp_path / "euro.csv")
    assert list(frame.columns) == ["id", "price", "city"] and len(frame) == 2
    assert "euro.csv is separated by ';', not commas" in capsys.readouterr().out
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(csvfile.TableFileError, match=r"empty\.csv is empty \(0 bytes\)"):
        csvfile.read(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("id,target\n")
    with pytest.raises(csvfile.TableFileError, match=r"header\.csv has a header \(id, target\) and no row"):
        csvfile.read(tmp_path / "header.csv")


def test_a_forgotten_nb_or_names_joined_by_commas_are_said_before_any_kernel(tmp_path, capsys, monkeypatch):
    from kagglekit.tools import cli, notebook_runner

    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel would start")
    monkeypatch.setattr(notebook_runner, "run_notebook", no_kernel)
    monkeypatch.chdir(REPO)  # notebooks/ and kernel-metadata/, as make runs it
    out = tmp_path / "runs"
    assert cli.main(["run", "-p", "data_dir='/my/comp'", "--output", str(out)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["error: P=data_dir='/my/comp' without NB would run every notebook with these parameters: name the "
                    "notebook, e.g. make run NB=tabular P=..."]
    with pytest.raises(SystemExit, match='NB takes names separated by spaces: NB="tabular quickstart"'):
        cli.main(["run", "tabular,quickstart", "--output", str(out)])
    assert cli.main(["run", "tabular", "quickstart", "-p", "epochs=-1", "--output", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: tabular: ")  # of several notebooks, the one refusing named
    assert not out.exists()


def test_what_the_kit_decided_about_the_input_shows_on_the_terminal_too(tmp_path):
    """`make run` prints the notebook's notices (a separator found, a smoke run keeping a value, a
    folder read as another) where the user looks, not only inside the executed notebook."""
    import subprocess
    import sys
    rng = np.random.default_rng(0)
    rows = [f"{i};{a:.3f};{b:.3f};{'yes' if a > b else 'no'}" for i, (a, b) in enumerate(rng.random((200, 2)))]
    (tmp_path / "train.csv").write_text("id;a;b;target\n" + "\n".join(rows) + "\n")
    done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", "quickstart", "--output",
                           str(tmp_path / "runs"), "-p", f"data_dir={tmp_path / 'train.csv'}", "-p", "smoke=True",
                           "-p", "epochs=1"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line.strip() for line in done.stdout.splitlines() if "quickstart said:" in line]
    assert "quickstart said: train.csv is separated by ';', not commas: read so" in said
    assert any(line.startswith("quickstart said: smoke run with your epochs=1") for line in said)
