"""Bad data folders through whole notebooks (issue 84): tests/test_datafolders.py runs every mutation through
each notebook's first data cell; here each notebook runs end to end (smoke size, papermill, as `make run` does)
on mutated copies of its good stand-in: every mutation its first cell refuses (35 in all, about 5 s each:
the notebook stops in its data cell), and one it handles (a whole training). A refusal must end the notebook
in its data cell with the kit's own words, before anything trained; a handled folder must give a submission
whose ids are the sample's, every one once. A mutation added to datamutations.MUTATIONS joins the refusals'
runs of every notebook whose first cell refuses it."""
import time
from pathlib import Path

import pandas as pd
import papermill
import pytest
from datamutations import (
    MUTATIONS,
    file_of_another_format,
    file_truncated,
    given_as_its_table,
    mutated_copy,
    target_half_missing,
)
from test_datafolders import PIPELINES, outcome

from kagglekit.tools.notebook_runner import run_notebook

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]
BY_NAME = {p.notebook: p for p in PIPELINES}
# The parameters that name the stand-in's columns (what a user sets for such a folder).
PARAMETERS = {
    "image_classification": {"target_column": "label"},
    "text_classification": {"text_column": "text", "target_column": "label"},
    "quickstart": {"target_column": "Fertilizer Name"},
    "timeseries_forecast": {"time_column": "date", "target_column": "sales", "feature_columns": "promo",
                            "series_column": "store"},
}
HANDLED = {"image_classification": file_truncated, "audio_classification": file_of_another_format,
           "segmentation_3d": file_truncated, "text_classification": target_half_missing,
           "text_generation": target_half_missing, "tabular": target_half_missing, "quickstart": given_as_its_table,
           "timeseries_forecast": target_half_missing}


def _trained(out: Path) -> list[str]:
    """What a training left in the run's folder: checkpoints and weights."""
    return sorted(p.name for p in out.rglob("*") if p.suffix in (".pt", ".safetensors", ".ckpt"))


def _run(name: str, given: Path, out: Path) -> None:
    params = {"data_dir": str(given), "smoke": True, **PARAMETERS.get(name, {})}
    run_notebook(REPO / "notebooks" / f"{name}.ipynb", params, output_dir=out, progress=False)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_every_refusal_of_a_notebooks_data_cell_ends_the_whole_notebook_there_before_training(name, tmp_path):
    pipeline, refused = BY_NAME[name], []
    good = pipeline.write(tmp_path / "good")
    for mutation in MUTATIONS:
        given = mutated_copy(good, tmp_path / "mutated", mutation, pipeline.layout)
        verdict, said = outcome(pipeline, given) if given is not None else ("n/a", "")
        if verdict != "refused":  # handled (one such case per notebook runs whole below), or not of this layout
            continue
        out, started = tmp_path / "run" / mutation.__name__, time.monotonic()
        with pytest.raises(papermill.PapermillExecutionError) as stopped:
            _run(name, given, out)
        message = said.split(": ", 1)[1].splitlines()[0]
        assert message in str(stopped.value), f"{name}, {mutation.__name__}: ended otherwise: {stopped.value}"
        assert _trained(out) == [], f"{name} trained before refusing {mutation.__name__}"
        refused.append(f"{mutation.__name__} {time.monotonic() - started:.1f} s")
    print(f"\n{name} | refused whole: {', '.join(refused)}", end="")
    assert refused, f"{name}: its first cell refused no mutation (the battery's table says otherwise)"


@pytest.mark.parametrize("name", list(HANDLED))
def test_a_whole_notebook_on_a_handled_mutation_submits_the_samples_ids(name, tmp_path):
    pipeline, mutation = BY_NAME[name], HANDLED[name]
    given = mutated_copy(pipeline.write(tmp_path / "good"), tmp_path / "mutated", mutation, pipeline.layout)
    assert given is not None
    verdict, said = outcome(pipeline, given)
    assert verdict == "handled", said  # the first-cell battery's verdict, which the whole run must keep
    out, started = tmp_path / "run", time.monotonic()
    _run(name, given, out)
    folder = given if given.is_dir() else given.parent
    sample = next(folder.rglob("sample_submission.csv"), None)
    if sample is not None:
        wanted = pd.read_csv(sample, dtype=str).iloc[:, 0]
        got = pd.read_csv(out / "submission.csv", dtype=str).iloc[:, 0]
        assert sorted(got) == sorted(wanted) and got.is_unique
    print(f"\n{name} | {mutation.__name__} | handled, whole run {time.monotonic() - started:.1f} s", end="")
