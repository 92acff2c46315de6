"""Bad data folders through whole notebooks (issue 84): tests/test_datafolders.py runs every mutation through
each notebook's first data cell; here each notebook runs end to end (smoke size, papermill, as `make run` does)
on two mutated copies of its good stand-in: one its first cell refuses, one it handles. A refusal must end
the notebook in its data cell with the kit's own words, before anything trained; a handled folder must give
a submission whose ids are the sample's, every one once."""
import time
from pathlib import Path

import pandas as pd
import papermill
import pytest
from datamutations import (
    file_of_another_format,
    file_truncated,
    given_as_its_table,
    mutated_copy,
    target_half_missing,
    target_renamed,
    test_file_missing as a_test_file_missing,  # not a test: a mutation
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
REFUSED = {name: target_renamed for name in HANDLED} | {"segmentation_3d": a_test_file_missing}
CASES = [(name, m, "refused") for name, m in REFUSED.items()] + [(name, m, "handled") for name, m in HANDLED.items()]


def _trained(out: Path) -> list[str]:
    """What a training left in the run's folder: checkpoints and weights."""
    return sorted(p.name for p in out.rglob("*") if p.suffix in (".pt", ".safetensors", ".ckpt"))


@pytest.mark.parametrize("name, mutation, expected", CASES, ids=lambda v: getattr(v, "__name__", v))
def test_a_whole_notebook_on_a_mutated_folder_refuses_before_training_or_submits_the_samples_ids(
        name, mutation, expected, tmp_path):
    pipeline = BY_NAME[name]
    given = mutated_copy(pipeline.write(tmp_path / "good"), tmp_path / "mutated", mutation, pipeline.layout)
    assert given is not None
    verdict, said = outcome(pipeline, given)
    assert verdict == expected, said  # the first-cell battery's verdict, which the whole run must keep
    params = {"data_dir": str(given), "smoke": True, **PARAMETERS.get(name, {})}
    out, started = tmp_path / "run", time.monotonic()
    if expected == "refused":
        with pytest.raises(papermill.PapermillExecutionError) as refused:
            run_notebook(REPO / "notebooks" / f"{name}.ipynb", params, output_dir=out, progress=False)
        message = said.split(": ", 1)[1].splitlines()[0]
        assert message in str(refused.value), f"{name} ended otherwise than its data cell: {refused.value}"
        assert _trained(out) == [], f"{name} trained before refusing"
        print(f"\n{name} | {mutation.__name__} | refused in {time.monotonic() - started:.1f} s", end="")
        return
    run_notebook(REPO / "notebooks" / f"{name}.ipynb", params, output_dir=out, progress=False)
    folder = given if given.is_dir() else given.parent
    sample = next(folder.rglob("sample_submission.csv"), None)
    if sample is not None:
        wanted = pd.read_csv(sample, dtype=str).iloc[:, 0]
        got = pd.read_csv(out / "submission.csv", dtype=str).iloc[:, 0]
        assert sorted(got) == sorted(wanted) and got.is_unique
    print(f"\n{name} | {mutation.__name__} | handled, whole run {time.monotonic() - started:.1f} s", end="")
