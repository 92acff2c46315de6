"""Inference-server competitions: a forecast served batch by batch through the competition's own
``kaggle_evaluation`` (the stand-in in the competition folder), the start-up limit and the
per-batch deadline reported as the gateway reports them, and the kit's fallback in time."""
import importlib
import sys
import time

import numpy as np
import pandas as pd
import pytest

from kagglekit.submit.serving import Served
from kagglekit.tools import evalstandin


def write_competition(folder):
    """A forecasting competition's folder as those competitions ship it: train.csv (long format,
    one row per date and series, dates as strings, series ids as strings, an extra feature
    column the test set also carries), test.csv (the dates after train's, a string ``row_id``
    per row; no target), and the ``kaggle_evaluation`` package beside them."""
    rng = np.random.default_rng(0)
    dates = pd.date_range("2024-01-01", periods=56, freq="D")
    rows = [{"date": d.strftime("%Y-%m-%d"), "series_id": s, "onpromotion": int(rng.integers(0, 3)),
             "target": 10 * (1 + k) + 5 * np.sin(2 * np.pi * i / 7) + rng.normal(0, 0.5)}
            for i, d in enumerate(dates) for k, s in enumerate(("store_1", "store_2", "store_3"))]
    pd.DataFrame(rows).to_csv(folder / "train.csv", index=False)
    future = pd.date_range(dates[-1] + pd.Timedelta(days=1), periods=6, freq="D")
    test = pd.DataFrame([{"row_id": f"{d:%Y-%m-%d}_{s}", "date": f"{d:%Y-%m-%d}", "series_id": s, "onpromotion": 0}
                         for d in future for s in ("store_1", "store_2", "store_3")])
    test.to_csv(folder / "test.csv", index=False)
    evalstandin.write(folder)
    return folder


@pytest.fixture
def competition(tmp_path, monkeypatch):
    (tmp_path / "comp").mkdir()
    folder = write_competition(tmp_path / "comp")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("kaggle_evaluation")]:
        monkeypatch.delitem(sys.modules, name)
    server = importlib.import_module("kaggle_evaluation.forecast_inference_server")
    errors = importlib.import_module("kaggle_evaluation.core.base_gateway")
    return folder, server, errors


def seasonal_naive(train: pd.DataFrame, season: int = 7):
    """The forecast served: each series' value one season before the asked date."""
    train = train.assign(date=pd.to_datetime(train["date"]))
    history = train.set_index(["series_id", "date"])["target"]

    def predict(batch: pd.DataFrame) -> pd.DataFrame:
        dates = pd.to_datetime(batch["date"])
        back = dates - pd.Timedelta(days=season) * np.ceil((dates - train["date"].max()).dt.days / season)
        return pd.DataFrame({"target": [history[(s, d)] for s, d in zip(batch["series_id"], back)]})
    return predict


def last_value(train: pd.DataFrame):
    """The cheap fallback: each series' last known value."""
    last = train.sort_values("date").groupby("series_id")["target"].last()
    return lambda batch: pd.DataFrame({"target": last[batch["series_id"]].to_numpy()})


def test_the_forecast_is_served_batch_by_batch_and_every_row_answered(competition, tmp_path):
    folder, server, _ = competition
    train = pd.read_csv(folder / "train.csv")
    # Counted from this test's start: the process here is pytest's worker, which may have run
    # longer than a notebook's 15 minutes before this test (a notebook's own default: its kernel).
    served = Served(seasonal_naive(train), last_value(train), deadline_s=5.0, margin_s=1.0, started=time.time())
    server.ForecastInferenceServer(served).run_local_gateway((str(folder / "test.csv"),))
    submission, test = pd.read_csv(tmp_path / "submission.csv"), pd.read_csv(folder / "test.csv")
    assert list(submission["row_id"]) == list(test["row_id"])  # every row, in the gateway's order
    truth = train.assign(date=pd.to_datetime(train["date"])).set_index(["series_id", "date"])["target"]
    expected = [truth[(s, pd.Timestamp(d) - pd.Timedelta(days=7))] for s, d in zip(test["series_id"], test["date"])]
    assert np.allclose(submission["target"], expected)
    report = served.report()
    assert report["batches"] == test["date"].nunique() == 6 and report["fallbacks"] == 0
    assert report["per_batch"][0]["deadline_s"] is None and report["per_batch"][1]["deadline_s"] == 5.0
    assert 0 <= report["startup_s"] < report["startup_limit_s"]


def test_a_start_up_past_the_limit_is_reported_as_the_gateway_reports_it(competition, monkeypatch):
    folder, server, errors = competition
    monkeypatch.setenv("KAGGLE_EVALUATION_STARTUP_LIMIT_S", "0")  # this test process started long ago
    with pytest.raises(errors.GatewayRuntimeError) as caught:  # the scoring rerun: serve()
        server.ForecastInferenceServer(lambda batch: None).serve()
    assert caught.value.error_type == errors.GatewayRuntimeErrorType.SERVER_NEVER_STARTED


def _slow_on_third_batch(predict, seconds: float):
    calls = []

    def slow(batch):
        calls.append(1)
        if len(calls) == 3:
            time.sleep(seconds)
        return predict(batch)
    return slow


def test_a_batch_past_its_deadline_fails_the_submission_unless_the_fallback_answers(competition, monkeypatch, tmp_path):
    folder, server, errors = competition
    monkeypatch.setenv("KAGGLE_EVALUATION_DEADLINE_S", "0.5")
    train = pd.read_csv(folder / "train.csv")
    bare = _slow_on_third_batch(seasonal_naive(train), 1.5)
    with pytest.raises(errors.GatewayRuntimeError) as caught:
        server.ForecastInferenceServer(bare).run_local_gateway((str(folder / "test.csv"),))
    assert caught.value.error_type == errors.GatewayRuntimeErrorType.GRPC_DEADLINE_EXCEEDED
    assert "batch 2 answered after" in caught.value.error_details

    served = Served(_slow_on_third_batch(seasonal_naive(train), 1.5), last_value(train), deadline_s=0.5, margin_s=0.3)
    with pytest.warns(UserWarning, match="batch 2: predict took more than 0.2 s .* answered by the fallback"):
        server.ForecastInferenceServer(served).run_local_gateway((str(folder / "test.csv"),))
    report = served.report()
    assert report["fallbacks"] == 1 and report["per_batch"][2]["answered_by"] == "fallback"
    assert report["per_batch"][2]["seconds"] < 0.5  # answered before the gateway's deadline
    submission = pd.read_csv(tmp_path / "submission.csv")
    third = submission.iloc[6:9]
    assert len(submission) == 18 and np.allclose(third["target"], last_value(train)(third.assign(
        series_id=third["row_id"].str.split("_", n=1).str[1]))["target"])
