"""Long time-series tables and their time split.

Kaggle's forecasting data comes as one long table: a row per series and time step,
a time column, the target, exogenous feature columns and (for many series) a
series-id column. ``read_table`` reads it (CSV or Parquet) into a frame sorted by
series and time (``load``: it, or the built-in series without a table); ``time_cuts``
puts every series' split at the same two cut times, so no training row is later than any
validation row; ``future_frame`` writes a forecast past the end of the data back in the
table's own form. The forecast windows: ``windows``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..readers import csvfile, filecheck

SUFFIXES = (".csv", ".parquet", ".pq")


class TableError(ValueError):
    """The table or the parameters naming its columns do not fit together."""


def names(columns) -> list[str]:
    """Column names from a comma-separated parameter ("store_nbr,family") or a list."""
    if isinstance(columns, str):
        return [c.strip() for c in columns.split(",") if c.strip()]
    return list(columns)


def find_file(path: Path, name: str) -> Path:
    """``path`` itself, or the table in the folder ``path`` (``name`` when several)."""
    if path.is_file():
        return path
    found = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUFFIXES  # not a zip's ._train.csv
                   and not any(filecheck.stray(part) for part in p.relative_to(path).parts))
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
    for _, part in out.groupby("series", sort=False):
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
    frame = csvfile.read(file) if file.suffix.lower() == ".csv" else pd.read_parquet(file)
    series_columns = names(series)
    features = names(features)
    named = {"time_column": time, "target_column": target,
             **{f"series_column {c!r}": c for c in series_columns},
             **{f"feature_columns {f!r}": f for f in features}}
    for param, column in named.items():
        if column and column not in frame.columns:
            raise TableError(f"{file.name} has no column {column!r} ({param}); its columns: "
                             f"{', '.join(map(str, frame.columns[:20]))}")
    for param, column in named.items():
        if column in (target, *features) and frame[column].isna().all():
            raise TableError(f"{file.name}'s {column!r} ({param}) is empty in all {len(frame)} rows: nothing to "
                             "forecast from. Name the column that holds the values")
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
        empty = out.loc[out[channels].isna().any(axis=1), "series"].unique()
        if len(empty):
            lacking = ", ".join(c for c in channels if out[c].isna().any())
            raise TableError(f"{file.name}: series {', '.join(map(str, empty[:3]))} ({len(empty)} in all) have no "
                             f"value of {lacking} in any row: drop them first")
    out[channels] = out[channels].astype(np.float32)
    return out, channels


def builtin_table(n_series: int, length: int, channels: int, seed: int = 0, period: int = 24):
    """``n_series`` built-in series (``datasets.series``, one seed each) as a long table."""
    import pandas as pd

    from ..readers.datasets import series
    names = ["target", *(f"x{c}" for c in range(1, channels))]
    parts = []
    for s in range(n_series):
        values = series(length, channels, seed=seed + s, period=period).numpy()
        part = pd.DataFrame(values, columns=names)
        part.insert(0, "time", np.arange(length))
        part.insert(0, "series", f"s{s}")
        parts.append(part)
    return pd.concat(parts, ignore_index=True), names


def load(path, *, time: str, target: str, features=(), series: str = "", name: str = "", **builtin) -> tuple:
    """``(frame, channels)`` of the table under ``path`` (``read_table``), or of the built-in
    series (``builtin_table(**builtin)``) when ``path`` is None (a notebook without ``data_dir``)."""
    if path is None:
        return builtin_table(**builtin)
    return read_table(path, time=time, target=target, features=features, series=series, name=name)


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


def future_frame(frame, windows, forecasts: np.ndarray, *, time: str, target: str,
                 series_columns) -> tuple:
    """The forecast past the end of the data in the long format, and its key columns: a row
    per series and future step, the series' own id columns (``series_columns``, comma-separated
    or a list), the time stamps continuing each series' spacing (dates stay dates), the forecast
    under the target's name."""
    import pandas as pd
    series_columns, rows = names(series_columns), []
    for i, end in enumerate(windows.origins.tolist()):
        past = frame.iloc[max(0, end - windows.lookback):end]
        ids = {c: past[c].iloc[-1] for c in series_columns}
        if not series_columns and frame["series"].nunique() > 1:
            ids = {"series": past["series"].iloc[-1]}
        times = future_times(past["time"].iloc[-1], spacing(past["time"]), forecasts.shape[1])
        rows += [{**ids, time: t, target: float(v)} for t, v in zip(times, forecasts[i])]
    long = pd.DataFrame(rows)
    return long, [*(series_columns or [c for c in ("series",) if c in long]), time]

