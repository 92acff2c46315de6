"""Forecast windows over a long table, and what a forecasting pipeline does with them.

``Windows``: each forecast origin a row, its past ``lookback`` rows of every channel, its future
``horizon`` target values, within one series and one split; ``latest``: each series' last past,
the input of the forecast past the end of the data. ``SeriesScale`` standardises each series'
channels with its training rows' statistics (and undoes it on forecasts); ``window_ids`` names
windows for out-of-fold files; ``panels`` are what ``plots.forecasts`` draws.
"""
from __future__ import annotations

import numpy as np
import torch

from .timeseries import TableError


class SeriesScale:
    """Each series' channels standardised with the mean and std of its training rows only."""

    def __init__(self, mean: np.ndarray, std: np.ndarray):
        self.mean, self.std = mean, std  # (series, channels)

    @classmethod
    def fit(cls, raw: np.ndarray, codes: np.ndarray, train_rows: np.ndarray) -> SeriesScale:
        """From ``raw`` (rows, channels) of series ``codes`` (0, 1, ...), its ``train_rows``; a
        series without training rows keeps mean 0 and std 1, a constant channel std 1e-6."""
        import pandas as pd
        series = range(int(codes.max()) + 1)
        part = pd.DataFrame(raw[train_rows]).groupby(codes[train_rows])
        mean = part.mean().reindex(series).fillna(0).to_numpy(np.float32)
        std = part.std().reindex(series).fillna(1).clip(lower=1e-6).to_numpy(np.float32)
        return cls(mean, std)

    def apply(self, raw: np.ndarray, codes: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((raw - self.mean[codes]) / self.std[codes])

    def undo(self, pred: np.ndarray, series) -> np.ndarray:
        """Forecasts of the target (channel 0) back in its own units; ``series``: each row's."""
        s = np.asarray(series)
        return pred * self.std[s, :1] + self.mean[s, :1]


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

    def subset(self, index) -> Windows:
        """The windows at ``index`` (positions), e.g. a cross-validation fold's."""
        part = Windows.__new__(Windows)
        part.__dict__.update(self.__dict__)
        index = torch.as_tensor(np.asarray(index), dtype=torch.long)
        part.origins, part.series = self.origins[index], self.series[index]
        return part

    def times(self, stamps) -> tuple[np.ndarray, np.ndarray]:
        """Each window's first and last forecast time (``stamps``: the table's time of each row):
        what time-ordered folds split on and purge by."""
        stamps, origins = np.asarray(stamps), self.origins.numpy()
        return stamps[origins], stamps[origins + self.horizon - 1]

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


def seasonal_naive(windows: Windows, period: int, horizon: int | None = None) -> np.ndarray:
    """The seasonal-naive forecast of every window: each step repeats the target one season
    (``period`` steps) before it, from the window's past (``lookback >= period``); ``horizon``
    steps (default: the windows' own; ``latest``'s have none, their future being unknown)."""
    steps = windows.lookback - period + np.arange(horizon or windows.horizon) % period
    return windows.past()[:, steps, windows.target].numpy()


def window_ids(frame, windows: Windows) -> list[str]:
    """"<series>|<origin time>" per window: ids that out-of-fold files and blends align on."""
    return [f"{frame['series'].iloc[o]}|{frame['time'].iloc[o]}" for o in windows.origins.tolist()]


def panels(frame, target: np.ndarray, codes: np.ndarray, windows: Windows, forecasts: dict,
           truth: np.ndarray | None = None, count: int = 3, history: int | None = None) -> list:
    """For ``plots.forecasts``: the last window of up to ``count`` series, each with the
    target's last ``history`` values before it (default: three horizons), its forecasts (model
    -> (windows, horizon), in the target's units) and, when known, the truth."""
    out, horizon = [], next(iter(forecasts.values())).shape[1]
    series_of = windows.series.numpy()
    for s in np.unique(series_of)[:count]:
        i = int(np.flatnonzero(series_of == s)[-1])
        origin = int(windows.origins[i])
        start = max(origin - (history or 3 * horizon), int(np.flatnonzero(codes == s)[0]))
        panel = {"title": f"series {frame['series'].iloc[origin - 1]}, after "
                          f"{frame['time'].iloc[origin - 1]}",
                 "history": target[start:origin], "forecasts": {m: f[i] for m, f in forecasts.items()}}
        if truth is not None:
            panel["truth"] = truth[i]
        out.append(panel)
    return out
