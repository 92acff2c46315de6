"""The outputs of other kernels, read for a blend: what each submits, and its out-of-fold record.

A kernel run with ``folds`` leaves, in its output root (what ``kernel_sources`` mounts in the
blending kernel): ``oof.parquet`` (id, step, fold, target, a column per model: ``kk.folds``),
``submission.csv`` (checked when it was written) and ``metrics.json`` whose ``submission``
names the model that file holds, its id columns and what its OOF values are (``oof_scale``:
a regression's values or a binary label's logits). ``read_source`` reads one such folder (or
the ``owner/slug`` of an attached kernel); ``align`` joins several on (id, step) and refuses
sources that did not predict the same rows of the same target, naming the first difference.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the kit imports without pandas
    import numpy as np
    import pandas as pd


class BlendError(ValueError):
    """Sources that cannot be blended: a missing file, other rows, another target."""


@dataclass
class Source:
    name: str  # the kernel's folder name (its slug on Kaggle)
    folder: Path
    model: str  # the OOF column of what submission.csv holds
    oof: pd.DataFrame  # id, step, fold, target, the submitted model's predictions
    submission: pd.DataFrame
    id_columns: list
    scale: str = "value"  # what the OOF values are: "value" (a regression's), "logit" (binary)


def split_sources(text: str) -> list[str]:
    """The ``sources`` parameter's references, separated by commas: a local run's folder whose name
    holds commas itself (``folds=3,seed=1``, as ``make run`` names them) is kept whole, the longest
    run of pieces that is an existing path winning; anything else (an owner/slug) is one piece."""
    pieces, out, i = [p.strip() for p in text.split(",")], [], 0
    while i < len(pieces):
        j = next((j for j in range(len(pieces), i + 1, -1) if Path(",".join(pieces[i:j])).exists()), i + 1)
        out.append(",".join(pieces[i:j]))
        i = j
    return [p for p in out if p]


def read_source(reference: str, roots: list[Path] | None = None) -> Source:
    """The kernel output at ``reference``: a folder, or an attached ``owner/slug``."""
    import pandas as pd
    folder = locate(reference, roots)
    missing = [f for f in ("oof.parquet", "submission.csv", "metrics.json") if not (folder / f).exists()]
    if missing:
        raise BlendError(f"source {reference!r} has no {', '.join(missing)}: run that notebook with "
                         "folds >= 2 to the end (every fold done) so it writes its out-of-fold "
                         "predictions beside its submission")
    submitted = json.loads((folder / "metrics.json").read_text()).get("submission", {})
    oof = pd.read_parquet(folder / "oof.parquet")
    model = submitted.get("model")
    if model not in oof.columns:
        raise BlendError(f"source {reference!r}: its metrics.json names no submitted model with "
                         f"OOF predictions (submission.model={model!r}; oof.parquet has "
                         f"{[c for c in oof.columns if c not in ('id', 'step', 'fold', 'target')]})")
    submission = pd.read_csv(folder / "submission.csv")
    id_columns = list(submitted.get("id_columns") or submission.columns[:1])
    scale = submitted.get("oof_scale", "value")
    if scale not in ("value", "logit"):
        raise BlendError(f"source {reference!r} submits class labels ({scale}): a blend averages "
                         "values or probabilities; blend its per-class probabilities instead")
    _whole(reference, oof, model, submission)
    return Source(folder.name, folder, model, oof[["id", "step", "fold", "target", model]],
                  submission, id_columns, scale)


def _whole(reference: str, oof: pd.DataFrame, model: str, submission: pd.DataFrame) -> None:
    """Refuse, naming the row, a source whose files were cut or edited: an OOF row twice, an OOF
    prediction or a submission cell empty or not a number (the blend's weights would be NaN)."""
    import pandas as pd
    twice = oof[oof.duplicated(["id", "step"], keep=False)]
    if len(twice):
        raise BlendError(f"source {reference!r}: oof.parquet holds id {twice['id'].iloc[0]!r} step "
                         f"{twice['step'].iloc[0]} {len(twice)} times: one row per id and step; take that "
                         "kernel's output again")
    values = pd.to_numeric(oof[model], errors="coerce")
    if values.isna().any():
        row = oof[values.isna()].iloc[0]
        raise BlendError(f"source {reference!r}: oof.parquet's {model} is empty or not a number at id "
                         f"{row['id']!r} ({int(values.isna().sum())} rows): its out-of-fold predictions are "
                         "incomplete; run that kernel to the end again")
    empty = submission.isna().any(axis=1)
    if empty.any():
        raise BlendError(f"source {reference!r}: submission.csv has {int(empty.sum())} rows with an empty cell "
                         f"(the first: row {int(empty.to_numpy().argmax()) + 2} of the file): take that kernel's "
                         "output again")


def locate(reference: str, roots: list[Path] | None = None) -> Path:
    """The folder of a kernel output: ``reference`` itself, or the attached ``owner/slug``."""
    from ..machine import env
    folder = env.local_or_attached(reference, roots)
    if not folder.is_dir():
        raise BlendError(f"source {reference!r}: no such folder and no attached kernel of that "
                         "owner/slug (add it to kernel_sources in the kernel's metadata)")
    return folder


def align(sources: list[Source]) -> pd.DataFrame:
    """One row per (id, step) that every source predicted: id, step, fold (the first source's),
    target, and a column per source (named after it) with its submitted model's prediction."""
    if len(sources) < 2:
        raise BlendError(f"a blend needs two sources or more, got {len(sources)}")
    names = [s.name for s in sources]
    if len(set(names)) < len(names):
        raise BlendError(f"two sources share the name {max(names, key=names.count)!r}: give "
                         "each kernel output its own folder")
    first = sources[0]
    table = first.oof.rename(columns={first.model: first.name})
    for source in sources[1:]:
        other = source.oof.rename(columns={source.model: source.name, "target": "_target"})
        merged = table.merge(other[["id", "step", "_target", source.name]], on=["id", "step"], how="inner")
        if len(merged) != len(table) or len(merged) != len(other):  # a fold missing in one: refused, not dropped
            raise BlendError(f"{source.name} and {first.name} predicted different out-of-fold rows "
                             f"({len(other)} vs {len(table)}, {len(merged)} shared): blend kernels "
                             "cross-validated on the same rows (the same data and split)")
        differ = (merged["target"] - merged["_target"]).abs() > 1e-9 * (1 + merged["target"].abs())
        if differ.any():
            row = merged[differ].iloc[0]
            raise BlendError(f"{source.name} and {first.name} disagree on the target of id "
                             f"{row['id']!r} step {row['step']}: {row['_target']} vs {row['target']} "
                             "(another target column, scaling or data version)")
        table = merged.drop(columns="_target")
    return table.sort_values(["id", "step"], kind="stable").reset_index(drop=True)


def submissions(sources: list[Source]) -> pd.DataFrame:
    """The sources' submission files side by side, rows matched by their id columns (the first
    source's order): the id columns, then ``<column>@<source>`` for every other column."""
    first = sources[0]
    table = first.submission.rename(columns={c: f"{c}@{first.name}" for c in first.submission.columns
                                             if c not in first.id_columns})
    for source in sources[1:]:
        same_columns = list(source.submission.columns) == list(first.submission.columns)
        if source.id_columns != first.id_columns or not same_columns:
            raise BlendError(f"{source.name}'s submission.csv has columns {list(source.submission.columns)}, "
                             f"{first.name}'s {list(first.submission.columns)}: blend submissions "
                             "of one competition")
        other = source.submission.rename(columns={c: f"{c}@{source.name}" for c in source.submission.columns
                                                  if c not in source.id_columns})
        merged = table.merge(other, on=first.id_columns, how="inner")
        if len(merged) != len(table) or len(other) != len(table):
            raise BlendError(f"{source.name}'s submission.csv holds other ids than {first.name}'s "
                             f"({len(other)} rows, {len(table)} rows, {len(merged)} shared)")
        table = merged
    return table


def nnls_weights(x, y) -> np.ndarray:
    """Non-negative weights summing to one for the columns of ``x`` (a column per model's
    predictions, flattened) that best fit ``y`` in squared error (scipy's NNLS); equal weights
    when no positive combination fits."""
    import numpy as np
    from scipy.optimize import nnls
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    w, _ = nnls(x, y)
    return w / w.sum() if w.sum() > 0 else np.full(x.shape[1], 1 / x.shape[1])
