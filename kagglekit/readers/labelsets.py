"""Several labels per row, as competitions write them: a column of labels separated by spaces
(Planet's ``image_name,tags``: "haze primary"; Human Protein Atlas' ``Id,Target``: "16 0"), or a
0/1 column per label (RANZCR CLiP, chest X-ray sets; the sample's answer columns are the labels).
What the readers share: labels to a 0/1 matrix and back to the competition's words.
"""
from __future__ import annotations

import numpy as np


class LabelSetError(ValueError):
    """Labels that cannot be read as sets: empty rows, or a label the training rows never show."""


def split(value) -> list[str]:
    """One row's labels: separated by spaces, in any order, repeats once."""
    return list(dict.fromkeys(str(value).split())) if isinstance(value, str) else []


def tag_classes(values, column: str) -> list[str]:
    """Every label the rows of ``column`` show, sorted; rows without one are refused, by count."""
    rows = [split(v) for v in values]
    empty = sum(not r for r in rows)
    if empty:
        raise LabelSetError(f"{empty} of {len(rows)} rows of {column!r} hold no label: a multi-label image needs "
                            "at least one (fill them, or drop those rows from train.csv)")
    classes = sorted({label for r in rows for label in r})
    if len(classes) < 2:
        raise LabelSetError(f"{column!r} shows only the label {classes}: several labels need two or more")
    return classes


def multi_hot(values, classes: list) -> np.ndarray:
    """(N, len(classes)) float32 of 0/1: each row's labels; one that is not in ``classes`` is refused."""
    index = {str(c): k for k, c in enumerate(classes)}
    out = np.zeros((len(values), len(classes)), np.float32)
    for i, value in enumerate(values):
        for label in split(value):
            if label not in index:
                raise LabelSetError(f"row {i} has the label {label!r}, which no training image shows "
                                    f"(known: {', '.join(map(str, classes[:8]))}...)")
            out[i, index[label]] = 1
    return out


def label_columns(table, answers: list[str], target_column: str) -> list[str]:
    """The sample's answer columns when train.csv holds each of them as 0/1 (a label per column, or a
    class as one-hot columns) and has no ``target_column``; else none."""
    if len(answers) < 2 or target_column in table.columns or not set(answers) <= set(map(str, table.columns)):
        return []
    values = table[answers].to_numpy()
    return answers if np.isin(values, (0, 1)).all() else []


def predicted(p, threshold: float) -> np.ndarray:
    """(N, L) bool: the labels above ``threshold``, at least the most probable one per row (a
    submission row is never empty)."""
    p = np.asarray(p, dtype=np.float64)
    chosen = p > threshold
    chosen[np.arange(len(p)), p.argmax(1)] = True
    return chosen


def as_tags(p, classes: list, threshold: float, separator: str = " ") -> list[str]:
    """Each row's labels above ``threshold`` in the competition's words, in ``classes``' order."""
    names = np.asarray([str(c) for c in classes], dtype=object)
    return [separator.join(names[row]) for row in predicted(p, threshold)]
