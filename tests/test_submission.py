"""The submission checker: what Kaggle would refuse, or score as zero, is named by row and
column before a submission is sent."""
import numpy as np
import pandas as pd
import pytest

from kagglekit import submission
from kagglekit.submit.submission import Schema, SubmissionError


@pytest.fixture
def sample(tmp_path):
    """A file competition's sample: ids in test.csv order, a zero forecast (Store Sales' shape)."""
    path = tmp_path / "sample_submission.csv"
    pd.DataFrame({"id": np.arange(3000888, 3000888 + 6), "sales": 0.0}).to_csv(path, index=False)
    return path


def _good(sample_path) -> pd.DataFrame:
    frame = pd.read_csv(sample_path)
    return frame.assign(sales=np.linspace(1, 6, len(frame)))


def test_the_sample_itself_and_a_good_submission_pass(sample):
    schema = Schema.from_sample(sample)
    assert schema.columns == ["id", "sales"] and schema.id_columns == ["id"] and schema.rows == 6
    assert submission.check(sample, schema) == 6
    shuffled = _good(sample).sample(frac=1, random_state=0)  # order does not matter here...
    assert submission.check(shuffled, schema) == 6
    with pytest.raises(SubmissionError, match=r"row 1 \(id=\d+\): rows must follow the sample's order"):
        submission.check(shuffled, Schema.from_sample(sample, ordered=True))  # ...unless it does


@pytest.mark.parametrize("break_it, message", [
    (lambda f: f.drop(index=2), r"5 rows, the competition expects 6"),
    (lambda f: f.assign(id=f["id"].where(f.index != 4, 1)),
     r"row 5 \(id=1\): not an id of the competition"),
    (lambda f: f.assign(extra=1.0), r"column 'extra' is not in the submission's format.*index=False"),
    (lambda f: f.assign(sales=f["sales"].where(f.index != 3, np.nan)),
     r"row 4 \(id=3000891\), column 'sales': empty \(NaN\)"),
    (lambda f: f.assign(sales=f["sales"].where(f.index != 1, np.inf)),
     r"row 2 \(id=3000889\), column 'sales': inf is not a finite number"),
    (lambda f: f[["sales", "id"]], r"columns in the order \['sales', 'id'\], the format is \['id', 'sales'\]"),
    (lambda f: f.rename(columns={"sales": "target"}), r"no column 'sales'"),
])
def test_each_problem_is_named_by_its_first_row_and_column(sample, break_it, message):
    with pytest.raises(SubmissionError, match=message):
        submission.check(break_it(_good(sample)), Schema.from_sample(sample))


def test_a_missing_id_is_named_when_the_count_still_matches(sample):
    frame = _good(sample)
    frame.loc[5, "id"] = frame.loc[4, "id"]  # six rows, one id twice, one missing
    with pytest.raises(SubmissionError, match=r"row 6 \(id=3000892\): the same id as row 5"):
        submission.check(frame, Schema.from_sample(sample))
    frame.loc[5, "id"] = 42
    with pytest.raises(SubmissionError, match=r"row 6 \(id=42\): not an id of the competition"):
        submission.check(frame, Schema.from_sample(sample))


def test_predictions_keyed_by_series_and_date_become_the_competitions_format(tmp_path, sample):
    """Store Sales: test.csv carries the ids of (date, store_nbr, family); the forecast is keyed
    by those, with dates as dates and store numbers as floats (a filled grid makes them so)."""
    test = pd.DataFrame({"id": np.arange(3000888, 3000894),
                         "date": ["2017-08-16"] * 3 + ["2017-08-17"] * 3,
                         "store_nbr": [1, 1, 2] * 2, "family": ["AUTOMOTIVE", "BREAD/BAKERY", "AUTOMOTIVE"] * 2})
    test.to_csv(tmp_path / "test.csv", index=False)
    forecast = test.drop(columns="id").assign(date=lambda f: pd.to_datetime(f["date"]),
                                              store_nbr=lambda f: f["store_nbr"] * 1.0,
                                              sales=np.arange(6.0)).iloc[::-1]
    frame, schema = submission.for_competition(forecast, tmp_path, ["store_nbr", "family", "date"], "sales")
    assert list(frame.columns) == ["id", "sales"] and submission.check(frame, schema) == 6
    assert frame.set_index("id")["sales"].to_dict() == dict(zip(test["id"], np.arange(6.0)))
    with pytest.raises(SubmissionError, match=r"test.csv asks for 3 rows .*'date': '2017-08-17'"):
        submission.for_competition(forecast.iloc[3:], tmp_path, ["store_nbr", "family", "date"], "sales")


def test_a_declared_schema_checks_a_submission_without_a_sample(tmp_path):
    frame = pd.DataFrame({"node": [3, 1, 2], "predicted": [0, 1, 1], "probability": [0.1, 0.8, 0.6]})
    schema = submission.declared(frame, ["node"])
    written = submission.write(frame, tmp_path / "submission.csv", schema)
    assert written == {"file": "submission.csv", "rows": 3, "columns": ["node", "predicted", "probability"],
                       "id_columns": ["node"], "format": "declared"}
    assert submission.check(tmp_path / "submission.csv", schema) == 3
    with pytest.raises(SubmissionError, match=r"row 2 \(node=1\), column 'predicted': 0.5 is not a "
                                              r"finite whole number"):
        submission.check(frame.assign(predicted=[0, 0.5, 1]), schema)
    assert not (tmp_path / "bad.csv").exists()
    with pytest.raises(SubmissionError):
        submission.write(frame.assign(probability=np.nan), tmp_path / "bad.csv", schema)
    assert not (tmp_path / "bad.csv").exists()  # checked before anything is written


def test_a_classifications_logits_become_its_submission_by_threshold_or_most_likely_class():
    import torch

    from kagglekit.submit.submission import from_logits
    binary = from_logits([7, 8, 9], torch.tensor([[-1.0], [0.3], [2.0]]), threshold=0.3, id_column="node")
    assert list(binary.columns) == ["node", "predicted", "probability"]
    assert binary["predicted"].tolist() == [0, 1, 1]  # from the threshold on, not from 0.5
    assert np.allclose(binary["probability"], torch.sigmoid(torch.tensor([-1.0, 0.3, 2.0])).numpy())
    several = from_logits(["a", "b"], torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]]))
    assert list(several.columns) == ["id", "predicted"] and several["predicted"].tolist() == [1, 0]
