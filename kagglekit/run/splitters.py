"""Splitters like scikit-learn's for what its own do not cover: the data's own single split
(``Holdout``) and a splitter over the distinct values of a group, such as dates (``Grouped``)."""
from __future__ import annotations

import numpy as np


class Holdout:
    """One split given by the data: train on ``train``, validate on ``val`` (positions or
    boolean masks over the rows). A splitter like scikit-learn's with a single fold, so a
    notebook's ``folds=1`` (the data's own split: Planetoid's public one, a time cut) runs the
    very cells ``folds=5`` runs."""

    def __init__(self, train, val):
        self.train, self.val = _positions(train), _positions(val)
        if np.intersect1d(self.train, self.val).size:
            raise ValueError("Holdout: a row is on both sides of the split")

    def __repr__(self) -> str:  # part of the split's key: another split, another folder
        from ..state.keys import fingerprint
        return f"Holdout({fingerprint([self.train, self.val])[:12]})"

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return 1

    def split(self, X=None, y=None, groups=None):
        yield self.train, self.val


def _positions(rows) -> np.ndarray:
    rows = as_array(rows)
    return np.flatnonzero(rows) if rows.dtype == bool else rows.astype(np.int64)


class Grouped:
    """A scikit-learn splitter applied to the distinct values of ``groups`` (sorted), every row
    of a value then following it: ``Grouped(TimeSeriesSplit(5))`` over the forecast windows of
    several series, grouped by their time stamp, never validates on a date it also trains on
    (scikit-learn's own ``TimeSeriesSplit`` splits rows by position, and windows of different
    series at one date straddle its cuts; its ``GroupKFold`` has no order in time)."""

    def __init__(self, splitter):
        self.splitter = splitter

    def __repr__(self) -> str:
        return f"Grouped({self.splitter!r})"

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.splitter.get_n_splits()

    def split(self, X, y=None, groups=None):
        if groups is None:
            raise ValueError("Grouped(...) splits the distinct values of groups: pass groups= "
                             "(e.g. each row's time stamp) to CrossValidation")
        values, which = np.unique(np.asarray(groups), return_inverse=True)
        for train, val in self.splitter.split(np.zeros((len(values), 1))):
            yield np.flatnonzero(np.isin(which, train)), np.flatnonzero(np.isin(which, val))


def as_array(values):
    if values is None:
        return None
    if hasattr(values, "detach"):
        return values.detach().cpu().numpy()
    return np.asarray(values)
