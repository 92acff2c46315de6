"""Long time-series tables, their time split, and the windows cut from them.

Kaggle's forecasting data comes as one long table: a row per series and time step,
a time column, the target, exogenous feature columns and (for many series) a
series-id column. ``read_table`` reads it (CSV or Parquet) into a frame sorted by
series and time; ``time_cuts`` puts every series' split at the same two cut times,
so no training row is later than any validation row; ``Windows`` cuts forecasting
windows (the past ``lookback`` steps of every channel, the next ``horizon`` steps of
the target) whose forecast lies wholly in one split and whose past stays in its series.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

SUFFIXES = (".csv", ".parquet", ".pq")


class TableError(ValueError):
    """The table or the parameters naming its columns do not fit together."""


def find_file(path: Path, name: str) -> Path:
    """``path`` itself, or the table in the folder ``path`` (``name`` when several)."""
    if path.is_file():
        return path
    found = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUFFIXES)
    if name:
        found = [p for p in found if p.name == name or p.stem == name]
    if len(found) != 1:
        listed = ", ".join(p.name for p in found[:8]) or "none"
        named = f" named {name!r}" if name else ""
        raise TableError(f"{path}: need exactly one .csv/.parquet table{named}, found {listed}; "
                         "set table= to the file's name")
    return found[0]


def _series_key(frame, columns: list[str]):
    """One series id from one column or several ("store_nbr,family" -> "1|BREAD/BAKERY")."""
    if len(columns) == 1:
        return frame[columns[0]].astype(str)
    return frame[columns].astype(str).agg("|".join, axis=1)


def _regular(out, channels: list[str], series_columns: list[str]):
    """Each series on its own regular time grid: missing time steps (a store closed on
    Christmas, a sensor down) inserted and filled forward, so that a window of ``lookback``
    rows is ``lookback`` steps of time. The step: the series' most common difference."""
    import pandas as pd
    parts, inserted = [], 0
    for key, part in out.groupby("series", sort=False):
        step = spacing(part["time"])
        if step is None:
            parts.append(part)
            continue
        grid = _grid(part["time"].iloc[0], part["time"].iloc[-1], step)
        full = part.set_index("time").reindex(grid)
        inserted += int(full["series"].isna().sum())
        full[["series", *series_columns]] = full[["series", *series_columns]].ffill()
        parts.append(full.rename_axis("time").reset_index()[out.columns])
    if inserted:
        print(f"kagglekit timeseries: {inserted} missing time steps inserted into their series' "
              "regular grid (values filled forward)")
    return pd.concat(parts, ignore_index=True)


def spacing(times):
    """A series' time step: its most common difference (a Timedelta, or a number); a month or a
    year when the dates fall on one day of the month; None for fewer than two times."""
    import pandas as pd
    times = pd.Series(times).reset_index(drop=True)
    if len(times) < 2:
        return None
    if pd.api.types.is_datetime64_any_dtype(times):
        freq = pd.infer_freq(times.iloc[-min(len(times), 60):]) if len(times) >= 3 else None
        if freq and freq[0] in "MQYA":  # calendar steps: unequal in days, regular on the calendar
            return pd.tseries.frequencies.to_offset(freq)
    return times.diff().dropna().mode().iloc[0]


def _grid(first, last, step):
    import pandas as pd
    if isinstance(first, pd.Timestamp):
        return pd.date_range(first, last, freq=step)
    return np.arange(first, last + step / 2, step)


def future_times(last, step, horizon: int) -> list:
    """The ``horizon`` time stamps after ``last``, ``step`` apart (dates or numbers)."""
    import pandas as pd
    if isinstance(last, pd.Timestamp):
        return list(pd.date_range(last, periods=horizon + 1, freq=step)[1:])
    return [last + step * (k + 1) for k in range(horizon)]


def read_table(path, *, time: str, target: str, features=(), series: str = "",
               name: str = "") -> tuple:
    """The table at ``path`` (a file, or the one table in a folder) as a frame sorted by
    series and time, with columns ``series``, the series' own id columns, ``time``, then the
    channels ``[target, *features]`` under their own names. Returns ``(frame, channels)``.

    ``series``: the column naming a row's series, or several comma-separated
    ("store_nbr,family"); "" for one series. Each series is put on its regular time grid
    (missing steps inserted); gaps in a channel are filled forward within the series (then
    backward for the first rows); a time column of dates is parsed. Raises TableError naming
    a missing column and the parameter that names it, or a repeated (series, time).
    """
    import pandas as pd
    file = find_file(Path(path), name)
    read = pd.read_csv if file.suffix.lower() == ".csv" else pd.read_parquet
    frame = read(file)
    series_columns = [c.strip() for c in series.split(",") if c.strip()]
    named = {"time_column": time, "target_column": target,
             **{f"series_column {c!r}": c for c in series_columns},
             **{"feature_columns": f for f in features}}
    for param, column in named.items():
        if column and column not in frame.columns:
            raise TableError(f"{file.name} has no column {column!r} ({param}); its columns: "
                             f"{', '.join(map(str, frame.columns[:20]))}")
    channels = [target, *features]
    out = frame[[*series_columns, time, *channels]].copy()
    out.insert(0, "series", _series_key(frame, series_columns) if series_columns else "0")
    out = out.rename(columns={time: "time"})
    if not pd.api.types.is_numeric_dtype(out["time"]):
        out["time"] = pd.to_datetime(out["time"])
    out = out.sort_values(["series", "time"], kind="stable").reset_index(drop=True)
    repeated = out.duplicated(["series", "time"])
    if repeated.any():
        row = out[repeated].iloc[0]
        raise TableError(f"{file.name}: series {row['series']!r} has time {row['time']} more than "
                         "once; name the series-id column (series_column) or aggregate first")
    out = _regular(out, channels, series_columns)
    gaps = int(out[channels].isna().sum().sum())
    if gaps:
        out[channels] = out.groupby("series")[channels].transform(lambda c: c.ffill().bfill())
        print(f"kagglekit timeseries: {gaps} missing values filled forward within their series")
    out[channels] = out[channels].astype(np.float32)
    return out, channels


def builtin_table(n_series: int, length: int, channels: int, seed: int = 0, period: int = 24):
    """``n_series`` built-in series (``datasets.series``, one seed each) as a long table."""
    import pandas as pd
    from .datasets import series
    names = ["target", *(f"x{c}" for c in range(1, channels))]
    parts = []
    for s in range(n_series):
        values = series(length, channels, seed=seed + s, period=period).numpy()
        part = pd.DataFrame(values, columns=names)
        part.insert(0, "time", np.arange(length))
        part.insert(0, "series", f"s{s}")
        parts.append(part)
    return pd.concat(parts, ignore_index=True), names


def time_cuts(times, fractions=(0.7, 0.15, 0.15)) -> tuple:
    """The first validation time and the first test time: the distinct times of the
    table split in time order by ``fractions`` (the same cut for every series)."""
    distinct = np.unique(np.asarray(times))
    if len(distinct) < 3:
        raise TableError(f"{len(distinct)} distinct times cannot be split in three")
    n_train = int(round(fractions[0] * len(distinct)))
    n_val = int(round(fractions[1] * len(distinct)))
    return distinct[n_train], distinct[n_train + n_val]


def split_of(times, cuts) -> np.ndarray:
    """0 (train), 1 (validation) or 2 (test) for every row."""
    return np.searchsorted(np.asarray(cuts), np.asarray(times), side="right")


class Windows(torch.utils.data.Dataset):
    """Forecast windows of one split over a sorted long table.

    A window's forecast origin is a row: its past is the ``lookback`` rows before it,
    its future the ``horizon`` target values from it on. Windows belong to ``split``
    when every future row is in that split (the past may reach into earlier ones: it
    is observed by then) and the whole window stays within one series. ``stride``
    keeps every n-th origin of a series.

    Args:
        values: (rows, channels) float tensor, the target in column ``target``.
        series: (rows,) integer code of each row's series (rows sorted by series, time).
        splits: (rows,) 0 / 1 / 2 from ``split_of``.
    """

    def __init__(self, values: torch.Tensor, series, splits, split: int, lookback: int,
                 horizon: int, stride: int = 1, target: int = 0):
        self.values, self.lookback, self.horizon, self.target = values, lookback, horizon, target
        series, splits = np.asarray(series), np.asarray(splits)
        rows = np.arange(lookback, len(values) - horizon + 1)
        first, last = rows - lookback, rows + horizon - 1
        ok = (series[first] == series[last]) & (splits[rows] == split) & (splits[last] == split)
        if not ok.any():
            raise TableError(f"no window of lookback {lookback} + horizon {horizon} fits in split "
                             f"{split} of any series; shorten lookback / horizon or widen the split")
        origins = rows[ok]
        # every stride-th origin counted from each series' first one
        starts = np.r_[0, np.flatnonzero(np.diff(series[origins])) + 1]
        offset = np.arange(len(origins)) - np.repeat(starts, np.diff(np.r_[starts, len(origins)]))
        self.origins = torch.from_numpy(origins[offset % stride == 0])
        self.series = torch.from_numpy(series[self.origins.numpy()])

    def __len__(self) -> int:
        return len(self.origins)

    def __getitem__(self, i: int):
        o = int(self.origins[i])
        return self.values[o - self.lookback:o], self.values[o:o + self.horizon, self.target]

    def subset(self, index) -> "Windows":
        """The windows at ``index`` (positions), e.g. a cross-validation fold's."""
        part = Windows.__new__(Windows)
        part.__dict__.update(self.__dict__)
        index = torch.as_tensor(np.asarray(index), dtype=torch.long)
        part.origins, part.series = self.origins[index], self.series[index]
        return part

    def past(self) -> torch.Tensor:
        """Every window's past at once, (windows, lookback, channels), without a Python loop."""
        return self.values.unfold(0, self.lookback, 1)[self.origins - self.lookback].transpose(1, 2)

    def future(self) -> torch.Tensor:
        """Every window's target future, (windows, horizon)."""
        return self.values[:, self.target].unfold(0, self.horizon, 1)[self.origins]


def latest(values: torch.Tensor, series, lookback: int) -> Windows:
    """One window per series whose past is the series' last ``lookback`` rows: the input of a
    forecast past the end of the data (its ``future()`` is unknown, by definition)."""
    series = np.asarray(series)
    ends = np.r_[np.flatnonzero(np.diff(series)) + 1, len(series)]
    starts = np.r_[0, ends[:-1]]
    short = ends - starts < lookback
    if short.any():
        raise TableError(f"{int(short.sum())} series are shorter than lookback={lookback}: "
                         "lower lookback")
    windows = Windows.__new__(Windows)
    windows.values, windows.lookback, windows.target = values, lookback, 0
    windows.horizon = 0
    windows.origins = torch.from_numpy(ends)
    windows.series = torch.from_numpy(series[ends - 1])
    return windows


def future_frame(frame, windows: Windows, forecasts: np.ndarray, *, time: str, target: str,
                 series_columns: list[str]):
    """The forecast past the end of the data in the long format: a row per series and future
    step, the series' own id columns, the time stamps continuing each series' spacing (dates
    stay dates), the forecast under the target's name."""
    import pandas as pd
    rows = []
    for i, end in enumerate(windows.origins.tolist()):
        past = frame.iloc[max(0, end - windows.lookback):end]
        ids = {c: past[c].iloc[-1] for c in series_columns}
        if not series_columns and frame["series"].nunique() > 1:
            ids = {"series": past["series"].iloc[-1]}
        times = future_times(past["time"].iloc[-1], spacing(past["time"]), forecasts.shape[1])
        rows += [{**ids, time: t, target: float(v)} for t, v in zip(times, forecasts[i])]
    return pd.DataFrame(rows)

