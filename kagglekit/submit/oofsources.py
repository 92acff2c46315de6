"""Other kernels' out-of-fold predictions joined to this notebook's pool, row by row.

A tabular kernel run with folds leaves ``oof.parquet`` (id, step, fold, target, a column per
model) and ``test.parquet`` (id, step, a column per model) in its output (``CrossValidation``
writes them). Attached (``kernel_sources``) or given as a folder, every model column of
``oof_sources`` joins the hill climb and the stack as ``<model>@<kernel>``, aligned by id and
step. A source is refused, naming the first difference, when it predicted other rows, split
them into other folds (its OOF predictions would then have seen our validation rows: the climb's
and the stack's CV would flatter them), or another target.
"""
from __future__ import annotations

import numpy as np

from .blend import BlendError, locate

RESERVED = ("id", "step", "fold", "target")


def read(reference: str, ids, fold_of, test_ids, target=None, roots=None) -> dict:
    """``{"<model>@<kernel>": (oof, test)}`` of one source, in the order of ``ids`` and
    ``test_ids`` (arrays of our rows: (rows,) or (rows, steps))."""
    import pandas as pd
    folder = locate(reference, roots)
    missing = [f for f in ("oof.parquet", "test.parquet") if not (folder / f).exists()]
    if missing:
        raise BlendError(f"oof_sources {reference!r} has no {', '.join(missing)}: run that kernel "
                         "with folds to the end (every fold of every model done)")
    oof, test = pd.read_parquet(folder / "oof.parquet"), pd.read_parquet(folder / "test.parquet")
    models = [c for c in oof.columns if c not in RESERVED]
    ours = pd.DataFrame({"id": np.asarray(ids).astype(str), "our_fold": np.asarray(fold_of)})
    oof["id"] = oof["id"].astype(str)
    _same_rows(folder.name, set(ours["id"]), set(oof["id"]), "OOF")
    merged = oof.merge(ours, on="id", how="left")
    differ = merged[merged["fold"] != merged["our_fold"]]
    if len(differ):
        row = differ.iloc[0]
        raise BlendError(f"oof_sources {folder.name}: its folds differ from ours (id {row['id']} is "
                         f"in its fold {row['fold']}, our fold {row['our_fold']}): cross-validate both "
                         "with the same folds, seed and train.csv")
    if target is not None and "target" in merged:
        _same_target(folder.name, merged, ours, target)
    test["id"] = test["id"].astype(str)
    _same_rows(folder.name, set(np.asarray(test_ids).astype(str)), set(test["id"]), "test")
    return {f"{m}@{folder.name}": (wide(oof, m, ours["id"]), wide(test, m, np.asarray(test_ids).astype(str)))
            for m in models}


def _same_rows(name: str, ours: set, theirs: set, what: str) -> None:
    if ours != theirs:
        lacking, extra = sorted(ours - theirs, key=str), sorted(theirs - ours, key=str)
        raise BlendError(f"oof_sources {name}: its {what} rows are not ours ({len(lacking)} of ours "
                         f"missing there{', e.g. ' + lacking[0] if lacking else ''}; {len(extra)} "
                         "not ours): attach a kernel of the same competition and train.csv")


def _same_target(name: str, merged, ours, target) -> None:
    truth = dict(zip(ours["id"], np.asarray(target, dtype=np.float64).reshape(len(ours), -1)[:, 0]))
    first = merged[merged["step"] == 0]
    off = np.abs(first["target"].to_numpy(np.float64) - first["id"].map(truth).to_numpy()) > 1e-6
    if off.any():
        raise BlendError(f"oof_sources {name}: its target differs from ours at id "
                         f"{first['id'].to_numpy()[off][0]} (another target column or encoding)")


def wide(frame, model: str, order) -> np.ndarray:
    """A model's column as (rows,) or (rows, steps), rows in ``order``."""
    table = frame.pivot(index="id", columns="step", values=model).reindex(index=order)
    values = table.to_numpy(np.float64)
    return values[:, 0] if values.shape[1] == 1 else values
