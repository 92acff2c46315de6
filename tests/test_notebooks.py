"""Notebooks: committed clean, and each runs under papermill with smoke parameters."""
import json
import math
from pathlib import Path

import pytest

from kagglekit.runner import parse_overrides, run_notebook

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


@pytest.mark.slow
def test_quickstart_trains_then_a_rerun_skips_training(tmp_path):
    out = run_notebook(REPO / "notebooks" / "quickstart.ipynb", {"smoke": True},
                       output_dir=tmp_path / "quickstart", progress=False)
    first = _metrics(out)
    assert first["config"]["epochs"] == 2  # the smoke values are what ran
    assert first["fit"]["stopped"] == "completed" and math.isfinite(first["fit"]["val_loss"])
    assert first["history"][-1]["val_loss"] < first["history"][0]["train_loss"]
    assert (out / "quickstart.ipynb").exists() and (out / "learning_curves.png").exists()
    second = _metrics(run_notebook(REPO / "notebooks" / "quickstart.ipynb", {"smoke": True},
                                   output_dir=out, progress=False))
    assert second["fit"]["stopped"] == "already_complete"
    assert second["fit"]["steps_this_session"] == 0


@pytest.mark.slow
def test_a_mistyped_parameter_fails_at_once_naming_it(tmp_path):
    import papermill
    with pytest.raises(papermill.PapermillExecutionError, match="did you mean 'epochs'"):
        run_notebook(REPO / "notebooks" / "quickstart.ipynb", {"epcohs": 1},
                     output_dir=tmp_path, progress=False)
    assert not (tmp_path / "checkpoints").exists()  # nothing ran


@pytest.mark.slow
def test_a_missing_data_dir_fails_with_its_name(tmp_path):
    import papermill
    with pytest.raises(papermill.PapermillExecutionError, match="data_dir='/no/such/folder' does not exist"):
        run_notebook(REPO / "notebooks" / "quickstart.ipynb", {"data_dir": "/no/such/folder"},
                     output_dir=tmp_path, progress=False)


def test_overrides_parse_like_python_literals():
    assert parse_overrides(["epochs=3", "lr=1e-3", "smoke=True", "data_dir=/x/y"]) == \
        {"epochs": 3, "lr": 1e-3, "smoke": True, "data_dir": "/x/y"}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_overrides(["epochs"])
