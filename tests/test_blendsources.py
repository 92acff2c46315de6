"""Bad blend sources (issue 84): the blend notebook's first data cell (``kk.blend.read_source`` of each
of ``kk.blend.split_sources(sources)``, ``kk.blend.align``) and its submissions' join
(``kk.blend.submissions``), given two good kernel outputs (written as kk.folds and kk.submission write
them: tests/test_blend.py) of which the second is mutated the ways a downloaded or hand-edited output
goes wrong. Each case is handled (the same aligned rows as the good pair, no value missing) or
refused with kk.blend's error naming the source, the file and the row; never a library's traceback,
never a blend of NaN.
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_blend import _binary_kernel

import kagglekit as kk

REPO = Path(__file__).resolve().parents[1]
SAME = "same"


def _oof(folder: Path, change) -> None:
    frame = pd.read_parquet(folder / "oof.parquet")
    change(frame).to_parquet(folder / "oof.parquet", index=False)


def _submission(folder: Path, change) -> None:
    change(pd.read_csv(folder / "submission.csv")).to_csv(folder / "submission.csv", index=False)


def _model(folder: Path) -> str:
    return json.loads((folder / "metrics.json").read_text())["submission"]["model"]


def oof_file_missing(folder):
    (folder / "oof.parquet").unlink()
    return None


def metrics_missing(folder):
    (folder / "metrics.json").unlink()
    return None


def oof_rows_shuffled(folder):
    _oof(folder, lambda f: f.sample(frac=1.0, random_state=0))
    return SAME


def oof_row_twice(folder):
    _oof(folder, lambda f: pd.concat([f, f.iloc[[7]]]))
    return None


def oof_prediction_empty(folder):
    model = _model(folder)
    _oof(folder, lambda f: f.assign(**{model: f[model].where(f.index != 11)}))
    return None


def oof_fold_missing(folder):
    _oof(folder, lambda f: f[f["fold"] != 2])
    return None


def oof_target_other(folder):
    _oof(folder, lambda f: f.assign(target=1 - f["target"]))
    return None


def submission_cell_empty(folder):
    _submission(folder, lambda f: f.assign(probability=f["probability"].where(f.index != 3)))
    return None


def submission_ids_other(folder):
    _submission(folder, lambda f: f.assign(node=f["node"] + 1))
    return None


def stray_files(folder):
    (folder / ".DS_Store").write_bytes(bytes(64))
    (folder / "__MACOSX").mkdir()
    (folder / "__MACOSX" / "._oof.parquet").write_bytes(bytes(16))
    return SAME


def same_source_twice(folder):
    return "twice"


MUTATIONS = (oof_file_missing, metrics_missing, oof_rows_shuffled, oof_row_twice, oof_prediction_empty,
             oof_fold_missing, oof_target_other, submission_cell_empty, submission_ids_other, stray_files,
             same_source_twice)


def outcome(first: Path, second: Path, twice: bool = False):
    """("handled" | "refused" | "FAIL", what was said, the aligned table)."""
    sources = f"{first},{first if twice else second}"
    try:
        loaded = [kk.blend.read_source(s) for s in kk.blend.split_sources(sources)]
        table = kk.blend.align(loaded)
        joined = kk.blend.submissions(loaded)
    except Exception as err:  # noqa: BLE001 (the point: which error, and what it says)
        ours = type(err).__module__.startswith("kagglekit") and len(str(err)) > 20
        return ("refused" if ours else "FAIL"), f"{type(err).__name__}: {err}", None
    if table.isna().any().any() or joined.isna().any().any():
        return "FAIL", "read on, but a value is missing", table
    return "handled", "", table


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels")
    rng = np.random.default_rng(3)
    y = (rng.random(200) < 0.3).astype(int)
    for name in ("a", "b"):
        _binary_kernel(root / f"gnn-{name}", f"gnn_{name}", 2.0 * y - 1 + rng.normal(scale=1.5, size=200), y,
                       rng.normal(size=40))
    return root / "gnn-a", root / "gnn-b"


def test_the_battery_reads_the_notebooks_first_data_cell():
    cells = json.loads((REPO / "notebooks" / "blend.ipynb").read_text())["cells"]
    source = "".join("".join(c["source"]) for c in cells)
    assert "kk.blend.read_source(s) for s in kk.blend.split_sources(sources)" in source
    assert "kk.blend.align(loaded)" in source and "kk.blend.submissions(loaded)" in source


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__)
def test_every_bad_source_is_handled_or_refused_by_name(mutation, good, tmp_path, capsys):
    first, second = good
    verdict, _, reference = outcome(first, second)
    assert verdict == "handled"
    copy = tmp_path / second.name
    shutil.copytree(second, copy)
    expected = mutation(copy)
    verdict, said, table = outcome(first, copy, twice=expected == "twice")
    with capsys.disabled():
        print(f"\nblend {mutation.__name__} | {verdict} | {said[:160]}", end="")
    assert verdict == ("handled" if expected == SAME else "refused"), said
    if expected == SAME:
        assert table.equals(reference)
