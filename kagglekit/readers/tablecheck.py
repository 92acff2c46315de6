"""The competition's tables checked before any training (issue 84): what the submission will hold
and what training learns from, refused in one line naming the file, the column, the value and the
fix, or handled and said, so that nothing surfaces after the training.

- ``check_ids``: every id of the sample once, every id of test.csv once, the two the same set (a
  sample of another version of the data is found now, not by the final submission check);
- ``labelled``: train.csv's answer column is not empty, holds two classes or more where a
  classifier learns it, and rows without an answer are left out of training and counted.

Each reader passes its own error type, so the notebook shows its own kind of message.
"""
from __future__ import annotations


def _repeated(frame, column: str, name: str, error: type[Exception]) -> None:
    counts = frame[column].astype(str).value_counts()
    twice = counts[counts > 1]
    if len(twice):
        first = str(twice.index[0])
        rows = [i + 2 for i in frame.index[frame[column].astype(str) == first][:3]]  # lines of the file
        raise error(f"{name}: id {first!r} is on {int(twice.iloc[0])} rows (lines {rows}; {len(twice)} ids repeated): "
                    f"a submission holds each id once. Remove the repeated rows, or use the competition's own {name}")


def check_ids(sample, test, id_column: str, error: type[Exception], sample_name: str = "sample_submission.csv",
              test_name: str = "test.csv") -> None:
    """Refuse repeated ids in the sample or in ``test`` (None: the sample is the test's only list), and
    ids of one that the other lacks."""
    _repeated(sample, id_column, sample_name, error)
    if test is None or id_column not in test.columns:
        return
    _repeated(test, id_column, test_name, error)
    ours, theirs = set(sample[id_column].astype(str)), set(test[id_column].astype(str))
    for here, there, a, b in ((ours, theirs, sample_name, test_name), (theirs, ours, test_name, sample_name)):
        extra = sorted(here - there)
        if extra:
            raise error(f"{a} has {len(extra)} ids that {b} lacks ({', '.join(extra[:3])}): the two files are not of "
                        f"the same version of the competition's data. Use the {a} and {b} downloaded together")


def labelled(values, column: str, error: type[Exception], classes: bool = True, file: str = "train.csv",
             parameter: str = "target_column"):
    """(which rows of ``values`` have an answer, a note about the others or ""); refused when none has,
    or, where the answer is a class (``classes``), when every answer is the same. ``parameter``: the
    notebook's parameter that names the column ("" where the layout fixes it)."""
    blank = values.isna() | values.astype(str).str.strip().eq("")
    named = f"{file}'s {column!r}" + (f" ({parameter})" if parameter else "")
    if bool(blank.all()):
        raise error(f"{named} is empty in all {len(values)} rows: no answer to learn. "
                    + (f"Name the column that holds the answers ({parameter})" if parameter else
                       f"Use the competition's own {file}"))
    kept = values[~blank].astype(str).unique()
    if classes and len(kept) < 2:
        raise error(f"{named} is {kept[0]!r} on every row: a classifier needs two classes "
                    f"or more. Check {parameter or 'the column'}, or that the whole {file} was copied")
    note = (f"{int(blank.sum())} rows of {file} without a {column!r} left out of training (unlabelled)"
            if bool(blank.any()) else "")
    return ~blank, note
