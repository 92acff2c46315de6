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


def _find_file(path: Path, name: str) -> Path:
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


def read_table(path, *, time: str, target: str, features=(), series: str = "",
               name: str = "") -> tuple:
    """The table at ``path`` (a file, or the one table in a folder) as a frame sorted by
    series and time, with columns ``series``, ``time``, then the channels ``[target,
    *features]`` under their own names. Returns ``(frame, channels)``.

    Gaps in a channel are filled forward within the series (then backward for the
    first rows); a time column of dates is parsed. Raises TableError naming a
    missing column and the parameter that names it, or a repeated (series, time).
    """
    import pandas as pd
    file = _find_file(Path(path), name)
    read = pd.read_csv if file.suffix.lower() == ".csv" else pd.read_parquet
    frame = read(file)
    named = {"time_column": time, "target_column": target, "series_column": series,
             **{"feature_columns": f for f in features}}
    for param, column in named.items():
        if column and column not in frame.columns:
            raise TableError(f"{file.name} has no column {column!r} ({param}); its columns: "
                             f"{', '.join(map(str, frame.columns[:20]))}")
    channels = [target, *features]
    out = frame[[time, *channels]].copy()
    out.insert(0, "series", frame[series].astype(str) if series else "0")
    out = out.rename(columns={time: "time"})
    if not pd.api.types.is_numeric_dtype(out["time"]):
        out["time"] = pd.to_datetime(out["time"])
    out = out.sort_values(["series", "time"], kind="stable").reset_index(drop=True)
    repeated = out.duplicated(["series", "time"])
    if repeated.any():
        row = out[repeated].iloc[0]
        raise TableError(f"{file.name}: series {row['series']!r} has time {row['time']} more than "
                         "once; name the series-id column (series_column) or aggregate first")
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

    def past(self) -> torch.Tensor:
        """Every window's past at once, (windows, lookback, channels), without a Python loop."""
        return self.values.unfold(0, self.lookback, 1)[self.origins - self.lookback].transpose(1, 2)

    def future(self) -> torch.Tensor:
        """Every window's target future, (windows, horizon)."""
        return self.values[:, self.target].unfold(0, self.horizon, 1)[self.origins]
