"""Long time-series tables: reading, the time split, windows, and loader workers."""
import numpy as np
import pandas as pd
import pytest
import torch

from kagglekit import loaders as data, timeseries, windows


def write_long_table(folder, suffix=".csv", seed=0):
    """Three series of different lengths and start times, rows shuffled, dates as text,
    a feature with gaps: the layout of a Kaggle forecasting competition's train file."""
    rng = np.random.default_rng(seed)
    parts = []
    for sid, (start, n) in {"store_1": ("2024-01-01", 300), "store_2": ("2024-02-15", 250),
                            "store_3": ("2024-01-10", 320)}.items():
        dates = pd.date_range(start, periods=n, freq="D")
        parts.append(pd.DataFrame({"store": sid, "date": dates.strftime("%Y-%m-%d"),
                                   "sales": rng.random(n) * 100, "promo": rng.integers(0, 2, n) * 1.0}))
    frame = pd.concat(parts).sample(frac=1, random_state=seed)
    frame.loc[frame.sample(frac=0.05, random_state=1).index, "promo"] = np.nan
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"train{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path, index=False)
    return path


def read(folder):
    return timeseries.read_table(folder, time="date", target="sales", features=["promo"], series="store")


def windows_of(frame, channels, lookback=14, horizon=7):
    codes = pd.factorize(frame["series"])[0]
    splits = timeseries.split_of(frame["time"], timeseries.time_cuts(frame["time"]))
    values = torch.from_numpy(frame[channels].to_numpy(np.float32))
    return [windows.Windows(values, codes, splits, k, lookback, horizon) for k in range(3)], codes


def test_no_window_forecasts_a_time_before_a_later_split_and_none_crosses_series(tmp_path):
    write_long_table(tmp_path)
    frame, channels = read(tmp_path)
    assert channels == ["sales", "promo"] and not frame[channels].isna().any().any()
    (train, val, test), codes = windows_of(frame, channels)
    times = frame["time"].to_numpy()
    future_times = [np.stack([times[o:o + 7] for o in w.origins.numpy()]) for w in (train, val, test)]
    assert future_times[0].max() < future_times[1].min()  # training never sees a later time
    assert future_times[1].max() < future_times[2].min()
    for w in (train, val, test):
        o = w.origins.numpy()
        assert (codes[o - 14] == codes[o + 6]).all()  # past and future in one series
        assert set(codes[o]) == {0, 1, 2}  # every series contributes to every split
        i = len(w) // 3  # the vectorised views equal item access
        assert torch.equal(w.past()[i], w[i][0]) and torch.equal(w.future()[i], w[i][1])


def test_csv_and_parquet_read_the_same_and_rows_come_sorted(tmp_path):
    write_long_table(tmp_path / "csv")
    write_long_table(tmp_path / "pq", suffix=".parquet")
    a, _ = read(tmp_path / "csv")
    b, _ = read(tmp_path / "pq")
    pd.testing.assert_frame_equal(a, b)
    for _, group in a.groupby("series"):
        assert group["time"].is_monotonic_increasing


def test_a_wrong_column_name_is_named_with_its_parameter(tmp_path):
    write_long_table(tmp_path)
    with pytest.raises(timeseries.TableError, match=r"no column 'Sales' \(target_column\).*sales"):
        timeseries.read_table(tmp_path, time="date", target="Sales", series="store")
    with pytest.raises(timeseries.TableError, match="more than once; name the series-id column"):
        timeseries.read_table(tmp_path, time="date", target="sales")  # three stores share dates


def test_stride_keeps_every_nth_origin_of_each_series():
    values = torch.arange(40, dtype=torch.float32)[:, None]
    codes = np.repeat([0, 1], 20)
    splits = np.zeros(40, dtype=int)
    w = windows.Windows(values, codes, splits, 0, 4, 2, stride=3)
    assert w.origins.tolist() == [4, 7, 10, 13, 16, 24, 27, 30, 33, 36]
    with pytest.raises(timeseries.TableError, match="no window of lookback 30"):
        windows.Windows(values, codes, splits, 0, 30, 2)


def test_loader_workers_follow_num_workers(monkeypatch):
    dataset = torch.utils.data.TensorDataset(torch.zeros(64, 2))
    monkeypatch.setenv("NUM_WORKERS", "2")
    assert data.make_loader(dataset, 8).num_workers == 2
    assert data.make_loader(dataset, 8, num_workers=1).num_workers == 1  # an explicit value wins
    monkeypatch.setenv("NUM_WORKERS", "0")
    assert data.make_loader(dataset, 8).num_workers == 0
    monkeypatch.setenv("NUM_WORKERS", "four")
    with pytest.raises(ValueError, match="NUM_WORKERS='four' must be a whole number"):
        data.make_loader(dataset, 8)


def test_the_builtin_series_form_a_long_table_of_every_series_in_time_order():
    frame, channels = timeseries.builtin_table(3, 200, 4, seed=5)
    assert channels == ["target", "x1", "x2", "x3"] and len(frame) == 600
    assert list(frame.columns) == ["series", "time", *channels]
    assert frame.groupby("series")["time"].apply(lambda t: t.is_monotonic_increasing).all()
    first, other = frame[frame.series == "s0"], frame[frame.series == "s1"]
    assert not np.allclose(first["target"].to_numpy(), other["target"].to_numpy())  # own seeds


def test_a_store_sales_table_two_id_columns_and_closed_days_reads_onto_a_regular_grid(tmp_path):
    """Store Sales' quirks: a series named by two columns (store_nbr, family, names with '/'),
    and every Christmas missing from the file (the stores are closed): the grid is made
    regular, so a window of 14 rows is 14 days."""
    dates = pd.date_range("2016-12-01", "2017-01-31", freq="D")
    dates = dates[dates != "2016-12-25"]
    rows = [{"id": i, "date": d.strftime("%Y-%m-%d"), "store_nbr": s, "family": f,
             "sales": float(i % 7), "onpromotion": 0}
            for i, (d, s, f) in enumerate((d, s, f) for s in (1, 2) for f in ("AUTOMOTIVE", "BREAD/BAKERY")
                                          for d in dates)]
    pd.DataFrame(rows).to_csv(tmp_path / "train.csv", index=False)
    frame, channels = timeseries.read_table(tmp_path, time="date", target="sales",
                                            features=["onpromotion"], series="store_nbr,family")
    assert frame["series"].nunique() == 4 and "2|BREAD/BAKERY" in set(frame["series"])
    one = frame[frame["series"] == "1|AUTOMOTIVE"]
    assert len(one) == 62 and one["time"].diff().dropna().eq(pd.Timedelta(days=1)).all()
    christmas = one[one["time"] == "2016-12-25"]
    assert float(christmas["sales"].iloc[0]) == float(one[one["time"] == "2016-12-24"]["sales"].iloc[0])
    values = torch.from_numpy(frame[channels].to_numpy(np.float32))
    codes = pd.factorize(frame["series"])[0]
    latest = windows.latest(values, codes, 14)
    assert torch.equal(latest.past()[3], values[-14:])  # the last series' last 14 steps
    future, keys = timeseries.future_frame(frame, latest, np.ones((4, 16)), time="date", target="sales",
                                           series_columns="store_nbr, family")
    assert keys == ["store_nbr", "family", "date"] and len(future) == 64
    assert future["date"].min() == pd.Timestamp("2017-02-01")
    assert future["date"].max() == pd.Timestamp("2017-02-16")


def test_spacing_keeps_calendar_months_and_numbers():
    months = pd.Series(pd.date_range("2020-01-31", periods=6, freq="ME"))
    step = timeseries.spacing(months)
    assert timeseries.future_times(months.iloc[-1], step, 2) == [pd.Timestamp("2020-07-31"),
                                                                 pd.Timestamp("2020-08-31")]
    assert timeseries.future_times(10, timeseries.spacing(pd.Series([0, 5, 10])), 3) == [15, 20, 25]


def test_a_series_without_any_value_is_refused_naming_it(tmp_path):
    """Forward filling fills gaps within a series; a series with no target at all would forecast from NaN."""
    path = write_long_table(tmp_path / "data")
    frame = pd.read_csv(path)
    frame.loc[frame["store"] == "store_2", "sales"] = np.nan
    frame.to_csv(path, index=False)
    with pytest.raises(timeseries.TableError, match=r"series store_2 \(1 in all\) have no value of sales in any row"):
        read(tmp_path / "data")
