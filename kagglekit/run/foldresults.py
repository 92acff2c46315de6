"""What cross-validation hands back: one fold's ``Predictions``, and the ``CVResult`` of all.

A fold's training returns ``Predictions`` (its validation rows' and the test rows' predictions
per model, and a record of plain values); ``CrossValidation.collect`` assembles the folds done
into a ``CVResult``: complete or not (which folds remain), the out-of-fold and test predictions,
the scores per model, and the summary's lines about them (``headlines``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..machine.display import headline
from .splitters import as_array


@dataclass
class Predictions:
    """What one fold's training returns: ``oof`` {model: its predictions of the fold's
    validation rows, in their order}, ``test`` {model: its predictions of the test rows} and
    ``record`` (plain values kept with the fold: fit summaries, per-seed scores; ``seconds``, the
    training's, added by the cross-validation). A model of ``kk.zoo`` returns its own predictions
    as arrays (the zoo names them). ``labelled`` {model: the fold model's predictions of every labelled
    row}: what a student of that fold learns from (``kk.distill.from_output``; written as
    ``labelled_fold<k>.parquet``). The one form of a fold's result from where it is trained to
    the CV table: a training on every GPU returns it from rank 0 (``run.launch`` hands it back
    as it is), the cache keeps it, ``CVResult`` assembles the folds'."""
    oof: dict | np.ndarray
    test: dict | np.ndarray = field(default_factory=dict)
    record: dict = field(default_factory=dict)
    labelled: dict = field(default_factory=dict)


@dataclass
class CVResult:
    complete: bool
    done: list
    pending: list
    message: str
    oof: dict = field(default_factory=dict)  # model -> (rows, ...) predictions, NaN where unseen
    test: dict = field(default_factory=dict)  # model -> mean test prediction over the folds
    scores: dict = field(default_factory=dict)  # model -> {"per_fold", "mean", "std", "oof"}
    records: dict = field(default_factory=dict)  # fold -> its "record" (fit summaries, ...)
    fold_test: dict = field(default_factory=dict)  # fold -> {model: that fold's test predictions}
    higher_is_better: bool = False  # the metric's direction

    def headlines(self, metric: str, models=None, note: str = "") -> list[dict]:
        """The summary's CV lines: each of ``models`` (default: every one scored) with its mean
        over the folds and their spread (``note`` beside it: the units); before every fold is
        done, one line without a value that says which folds remain."""
        if not self.complete:
            return [headline(f"CV {metric} ({self.message})", None)]
        lines = []
        for model in self.scores if models is None else models:
            score, count = self.scores[model], len(self.scores[model]["per_fold"])
            folds = f"mean of {count} folds" if count > 1 else "1 fold"  # not the score of their rows pooled
            details = [f"std {score['std']:.4g}"] * (count > 1) + [note] * bool(note)
            lines.append(headline(f"CV {metric} ({model}), {folds}" + (f" ({'; '.join(details)})" if details else ""),
                                  score["mean"], higher_is_better=self.higher_is_better))
        return lines

    def on_rows(self, model: str, size: int, rows, test_rows) -> np.ndarray:
        """``model``'s predictions placed in an array of ``size`` rows: its out-of-fold ones at
        ``rows`` (the rows the folds split, in order), its test ones at ``test_rows``, NaN
        elsewhere (rows no fold validated)."""
        oof, test = self.oof[model], self.test[model]
        out = np.full((size, *oof.shape[1:]), np.nan)
        out[as_array(rows)] = oof
        out[as_array(test_rows)] = test
        return out
