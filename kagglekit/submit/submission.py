"""A submission checked before it is sent: against the competition's sample, else a schema.

Kaggle scores a ``submission.csv`` only after the upload (or, in a code competition, after
hours of rerun), and a wrong one costs a daily submission. ``check`` finds what Kaggle would
refuse, or silently score as zero, before that: the columns (names, order), the ids (none
missing, none extra, none twice, in the sample's order where the competition needs it), the
row count, and the values (no NaN or inf, each of its column's type). The first problem is
named by row and column, with the fix.

A ``Schema`` comes from the competition's ``sample_submission.csv`` (``Schema.from_sample``)
or is declared by the notebook (a pipeline without a competition: the forecast's long
format, the GNN's node predictions).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("int", "float", "str", "date")


class SubmissionError(ValueError):
    """The submission does not hold what the competition expects."""


@dataclass
class Schema:
    """What a submission must hold.

    columns: every column, in order. id_columns: the columns that name a row (its key).
    kinds: column -> "int", "float", "str" or "date" (ids' kinds included). ids: the rows'
    keys that must appear, each once (a DataFrame of ``id_columns``; None: any). ordered: the
    rows must come in the order of ``ids``. rows: the row count when ``ids`` is not known.
    """
    columns: list
    id_columns: list
    kinds: dict = field(default_factory=dict)
    ids: object = None
    ordered: bool = False
    rows: int | None = None

    @classmethod
    def from_sample(cls, path: Path | str, id_columns: list | None = None,
                    ordered: bool = False, floats: list | tuple = ()) -> Schema:
        """The schema of a competition's ``sample_submission.csv``: its columns, ids (the first
        column unless named), row count and each column's kind. ``floats``: columns that hold
        probabilities whatever the sample's placeholders say (RANZCR's sample holds 0 in each)."""
        import pandas as pd
        sample = pd.read_csv(path)
        ids = list(id_columns or sample.columns[:1])
        kinds = {c: "float" if str(c) in set(map(str, floats)) else _kind(sample[c]) for c in sample.columns}
        return cls(list(sample.columns), ids, kinds, sample[ids].copy(), ordered, len(sample))


def _kind(column) -> str:
    import pandas as pd
    if pd.api.types.is_bool_dtype(column) or pd.api.types.is_integer_dtype(column):
        return "int"
    if pd.api.types.is_float_dtype(column):
        return "float"
    if pd.api.types.is_datetime64_any_dtype(column):
        return "date"
    return "str"


def _fail(where: str, what: str) -> None:
    raise SubmissionError(f"{where}: {what}")


def check(submission, schema: Schema, name: str = "submission.csv") -> int:
    """Raise SubmissionError naming the first problem of ``submission`` (a DataFrame or a CSV
    path) against ``schema``; the number of rows when it is right."""
    import pandas as pd
    frame = submission if isinstance(submission, pd.DataFrame) else pd.read_csv(submission)
    _check_columns(frame, schema, name)
    expected = schema.rows if schema.ids is None else len(schema.ids)  # type: ignore[arg-type]  # ids: a sequence
    if expected is not None and len(frame) != expected:
        _fail(name, f"{len(frame)} rows, the competition expects {expected} "
                    f"({'one per id of the sample' if schema.ids is not None else 'as declared'})")
    for column in schema.columns:
        _check_values(frame, column, schema.kinds.get(column), name)
    _check_ids(frame, schema, name)
    return len(frame)


def _check_columns(frame, schema: Schema, name: str) -> None:
    have, want = list(frame.columns), list(schema.columns)
    missing = [c for c in want if c not in have]
    extra = [c for c in have if c not in want]
    if missing:
        _fail(name, f"no column {missing[0]!r} (columns must be {want})")
    if extra:
        _fail(name, f"column {extra[0]!r} is not in the submission's format {want}: drop it "
                    "(an index written by to_csv? pass index=False)")
    if have != want:
        _fail(name, f"columns in the order {have}, the format is {want}")


def _plain(value):
    """A numpy scalar as the Python value it holds (np.int64(7) reads as 7)."""
    return value.item() if hasattr(value, "item") else value


def _row(frame, i: int, schema_ids) -> str:
    key = ", ".join(f"{c}={_plain(frame[c].iloc[i])!r}" for c in schema_ids if c in frame.columns)
    return f"row {i + 1}" + (f" ({key})" if key else "")


def _check_values(frame, column: str, kind: str | None, name: str) -> None:
    import numpy as np
    import pandas as pd
    values = frame[column]
    missing = values.isna().to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        _fail(name, f"{_row(frame, i, [frame.columns[0]])}, column {column!r}: empty (NaN); "
                    "every cell needs a value")
    if kind in ("int", "float"):
        numbers = pd.to_numeric(values, errors="coerce")
        bad = numbers.isna().to_numpy() | ~np.isfinite(numbers.to_numpy(dtype=float))
        if kind == "int":
            bad |= ~bad & (numbers.fillna(0).to_numpy(dtype=float) % 1 != 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            _fail(name, f"{_row(frame, i, [frame.columns[0]])}, column {column!r}: "
                        f"{_plain(values.iloc[i])!r} is not a finite "
                        f"{'whole number' if kind == 'int' else 'number'}")
    elif kind == "date":
        parsed = pd.to_datetime(values, errors="coerce")
        if parsed.isna().any():
            i = int(np.flatnonzero(parsed.isna().to_numpy())[0])
            _fail(name, f"{_row(frame, i, [frame.columns[0]])}, column {column!r}: "
                        f"{_plain(values.iloc[i])!r} is not a date")


def row_keys(frame, columns: list) -> list[tuple]:
    """Each row's key as a tuple of strings (a sample read from CSV and a frame built in
    memory compare alike: 7 and "7", 2024-01-05 and Timestamp('2024-01-05'))."""
    import pandas as pd
    parts = []
    for c in columns:
        col = frame[c]
        if pd.api.types.is_datetime64_any_dtype(col):
            col = col.dt.strftime("%Y-%m-%d %H:%M:%S").str.replace(" 00:00:00", "", regex=False)
        elif pd.api.types.is_float_dtype(col) and (col % 1 == 0).all():
            col = col.astype("int64")
        parts.append(col.astype(str).tolist())
    return list(zip(*parts))


def _check_ids(frame, schema: Schema, name: str) -> None:
    keys = row_keys(frame, schema.id_columns)
    seen: dict = {}
    for i, key in enumerate(keys):
        if key in seen:
            _fail(name, f"{_row(frame, i, schema.id_columns)}: the same id as row {seen[key] + 1}")
        seen[key] = i
    if schema.ids is None:
        return
    wanted = row_keys(schema.ids, schema.id_columns)
    allowed = set(wanted)
    for i, key in enumerate(keys):
        if key not in allowed:
            _fail(name, f"{_row(frame, i, schema.id_columns)}: not an id of the competition")
    missing = [k for k in wanted if k not in seen]
    if missing:
        _fail(name, f"no row for id {dict(zip(schema.id_columns, missing[0]))} "
                    f"({len(missing)} ids missing)")
    if schema.ordered:
        for i, (have, want) in enumerate(zip(keys, wanted)):
            if have != want:
                _fail(name, f"{_row(frame, i, schema.id_columns)}: rows must follow the sample's "
                            f"order (expected {dict(zip(schema.id_columns, want))} here)")


def declared(frame, id_columns: list) -> Schema:
    """The schema of a submission a notebook defines itself (no competition's sample): its
    columns in order, ``id_columns`` the key, each column's kind, its row count."""
    return Schema(list(frame.columns), list(id_columns), {c: _kind(frame[c]) for c in frame.columns},
                  rows=len(frame))


def for_competition(predictions, folder: Path | str | None, keys: list, target: str):
    """``predictions`` (a row per ``keys``, the value under ``target``) in a file competition's
    own format when ``folder`` holds its ``sample_submission.csv`` and ``test.csv``: each test
    row's id looked up by its keys, the sample's columns; with the schema to check it against.
    Without them: ``predictions`` as they are, and their declared schema."""
    import pandas as pd
    folder = Path(folder) if folder else None
    if folder is None or not ((folder / "sample_submission.csv").exists() and (folder / "test.csv").exists()):
        return predictions, declared(predictions, keys)
    schema = Schema.from_sample(folder / "sample_submission.csv")
    if len(schema.columns) != 2:
        raise SubmissionError(f"{folder / 'sample_submission.csv'} has {len(schema.columns)} columns: "
                              "map the predictions onto them in the notebook, then check()")
    rows = pd.read_csv(folder / "test.csv")
    missing_keys = [k for k in keys if k not in rows.columns]
    if missing_keys:
        raise SubmissionError(f"{folder / 'test.csv'} has no column {missing_keys[0]!r} to match "
                              f"the predictions by (its columns: {list(rows.columns)[:10]})")
    merged = rows.assign(_key=row_keys(rows, keys)).merge(
        predictions.assign(_key=row_keys(predictions, keys))[["_key", target]], on="_key", how="left")
    lacking = merged[target].isna().to_numpy()
    if lacking.any():
        first = merged[lacking].iloc[0]
        raise SubmissionError(f"test.csv asks for {int(lacking.sum())} rows the predictions do not "
                              f"cover, e.g. { {k: _plain(first[k]) for k in keys} } (a horizon too "
                              "short, a series missing from the training data?)")
    id_column, value_column = schema.columns[0], schema.columns[-1]
    return pd.DataFrame({id_column: merged[id_column], value_column: merged[target]}), schema


def write(frame, path: Path | str, schema: Schema) -> dict:
    """Check ``frame`` against ``schema``, then write it as CSV atomically (no index). Returns
    what metrics.json records of it: file, rows, columns, id columns, the format checked against."""
    from ..state import atomic
    path = Path(path)
    rows = check(frame, schema, path.name)
    with atomic.atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    against = "competition sample" if schema.ids is not None else "declared"
    print(f"{path.name}: {rows} rows, checked against "
          f"{'the sample submission' if schema.ids is not None else 'its declared format'}")
    return {"file": path.name, "rows": rows, "columns": list(schema.columns),
            "id_columns": list(schema.id_columns), "format": against}


def write_for(predictions, folder, keys: list, target: str, path: Path | str) -> dict:
    """``predictions`` in the competition's format (``for_competition``), checked, written to ``path``."""
    frame, schema = for_competition(predictions, folder, keys, target)
    return write(frame, path, schema)


def from_columns(folder, ids, values, classes: list | None = None):
    """A tabular competition's submission: ``sample_submission.csv``'s columns filled for
    ``ids`` (test.csv's), with the schema to check it against. ``values``: one per row (a
    probability, a value, a label), or a probability per class (N, C), written to the sample's
    per-class columns, each named by its class (``Status_CL`` or ``CL`` for class ``CL``)."""
    import numpy as np
    import pandas as pd
    schema = Schema.from_sample(Path(folder) / "sample_submission.csv")
    values = np.asarray(values)
    frame = pd.DataFrame({schema.columns[0]: ids})
    if values.ndim == 1:
        if len(schema.columns) != 2:
            raise SubmissionError(f"sample_submission.csv has {len(schema.columns)} columns, the "
                                  "predictions one value per row: predict a probability per class")
        frame[schema.columns[1]] = values
        return frame, schema
    for column in schema.columns[1:]:
        match = [k for k, c in enumerate(classes or []) if column == str(c) or column.endswith(f"_{c}")]
        if len(match) != 1:
            raise SubmissionError(f"sample_submission.csv's column {column!r} names none of the "
                                  f"classes {list(classes or [])[:8]} (or several)")
        frame[column] = values[:, match[0]]
    return frame, schema


def from_logits(ids, logits, threshold: float = 0.0, id_column: str = "id"):
    """A classification's submission from its logits, a row per id: one logit per row (a binary
    label) is positive from ``threshold`` on (the best-F1 one chosen on validation), its
    probability beside it; several logits per row: the most likely class."""
    import numpy as np
    import pandas as pd
    import torch
    scores = torch.as_tensor(logits).reshape(len(ids), -1).float()
    binary = scores.shape[1] == 1
    predicted = (scores[:, 0] >= threshold).long() if binary else scores.argmax(1)
    frame = pd.DataFrame({id_column: np.asarray(ids), "predicted": predicted.numpy()})
    if binary:
        frame["probability"] = torch.sigmoid(scores[:, 0]).numpy()
    return frame
