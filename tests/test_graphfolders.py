"""Bad graph folders (issue 84): gnn_node_classification's first data cell
(``kk.graphsets.load(run.data_dir(), ...)``) given a good Elliptic or Planetoid folder mutated
the ways shared copies of them go wrong, either reads a graph a model can train on (no NaN
feature, some labelled node, every edge within the graph, the good folder's graph where the
mutation changed only the form) or refuses before any training with the kit's error naming the
file and what is wrong; never a library's traceback, never every node silently unlabelled.

The good folders: Elliptic in Kaggle's layout (tools/standins.py: no header, large txIds, classes
"1"/"2"/"unknown" in another row order) and Planetoid's eight raw files (tests/test_graph.py).
"""
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_graph import write_planetoid

from kagglekit.graphs import graphsets
from kagglekit.run import datadir
from kagglekit.tools import standins

REPO = Path(__file__).resolve().parents[1]
FEATURES, EDGES, CLASSES = (Path("elliptic_bitcoin_dataset") / name for name in graphsets.ELLIPTIC)
SAME = "same"  # a mutation of form only: the good folder's graph must come back


def _rewrite(path: Path, change, **read) -> None:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, **read)
    change(frame).to_csv(path, index=False, header=read.get("header", "infer") is not None)


def features_with_a_header(folder: Path):
    _rewrite(folder / FEATURES, lambda f: pd.concat(
        [pd.DataFrame([["txId", "time_step", *(f"f{i}" for i in range(f.shape[1] - 2))]], columns=f.columns), f]),
        header=None)
    return folder, SAME


def transaction_listed_twice(folder: Path):
    _rewrite(folder / FEATURES, lambda f: pd.concat([f, f.iloc[[5]]]), header=None)
    return folder, None


def _cell(row: int, column: int, value: str):
    def change(frame):
        frame.iat[row, column] = value
        return frame
    return change


def feature_cell_empty(folder: Path):
    _rewrite(folder / FEATURES, _cell(3, 7, ""), header=None)
    return folder, None


def feature_cell_text(folder: Path):
    _rewrite(folder / FEATURES, _cell(4, 9, "n/a"), header=None)
    return folder, None


def classes_as_words(folder: Path):
    _rewrite(folder / CLASSES, lambda f: f.assign(**{"class": f["class"].replace({"1": "illicit", "2": "licit"})}))
    return folder, None


def classes_of_other_transactions(folder: Path):
    _rewrite(folder / CLASSES, lambda f: f.assign(txId=f["txId"] + "0"))  # another copy's ids: none match
    return folder, None


def classes_with_extra_rows(folder: Path):
    _rewrite(folder / CLASSES, lambda f: pd.concat([f, pd.DataFrame({"txId": ["1", "2"], "class": ["1", "2"]})]))
    return folder, SAME


def edge_to_an_unknown_transaction(folder: Path):
    _rewrite(folder / EDGES, lambda f: pd.concat([f, pd.DataFrame({"txId1": [f["txId1"].iloc[0]], "txId2": ["7"]})]))
    return folder, None


def edges_repeated_and_self_loops(folder: Path):
    _rewrite(folder / EDGES, lambda f: pd.concat([f, f.iloc[:20], pd.DataFrame({"txId1": f["txId1"].iloc[:3],
                                                                                 "txId2": f["txId1"].iloc[:3]})]))
    return folder, SAME


def classes_file_missing(folder: Path):
    (folder / CLASSES).unlink()
    return folder, None


def stray_files(folder: Path):
    for sub in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        (sub / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(64))
    macosx = folder / "__MACOSX" / "elliptic_bitcoin_dataset"
    macosx.mkdir(parents=True)
    (macosx / "._elliptic_txs_features.csv").write_bytes(bytes(16))  # a zip's resource fork: not the table
    return folder, SAME


def one_level_too_high(folder: Path):
    return folder.parent, SAME


ELLIPTIC_MUTATIONS = (features_with_a_header, transaction_listed_twice, feature_cell_empty, feature_cell_text,
                      classes_as_words, classes_of_other_transactions, classes_with_extra_rows,
                      edge_to_an_unknown_transaction, edges_repeated_and_self_loops, classes_file_missing,
                      stray_files, one_level_too_high)


def planetoid_file_missing(folder: Path):
    next(folder.rglob("ind.tiny.ty")).unlink()
    return folder, None


def planetoid_graph_cut_short(folder: Path):
    graph = next(folder.rglob("ind.tiny.graph"))
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    return folder, None


def planetoid_stray_files(folder: Path):
    raw = next(folder.rglob("ind.tiny.graph")).parent
    (raw / ".DS_Store").write_bytes(bytes(64))
    (folder / "__MACOSX").mkdir()
    (folder / "__MACOSX" / "._ind.tiny.graph").write_bytes(bytes(16))
    return folder, SAME


PLANETOID_MUTATIONS = (planetoid_file_missing, planetoid_graph_cut_short, planetoid_stray_files, one_level_too_high)


def outcome(given: Path, same_as=None) -> tuple[str, str]:
    """("handled" | "refused" | "FAIL", what was said): the notebook's reading of ``given``."""
    try:
        data = graphsets.load(datadir.resolve(str(given), (), False))
    except Exception as err:  # noqa: BLE001 (the point: which error, and what it says)
        ours = type(err).__module__.startswith("kagglekit") and len(str(err)) > 20
        return ("refused" if ours else "FAIL"), f"{type(err).__name__}: {err}"
    wrong = ([f"{int(data.x.isnan().sum())} NaN features"] * bool(data.x.isnan().any())
             + ["no labelled node"] * (not (data.y >= 0).any())
             + ["an edge outside the graph"] * bool(data.edge_index.max() >= data.num_nodes))
    if same_as is not None and not (torch.equal(data.x, same_as.x) and torch.equal(data.y, same_as.y)
                                    and torch.equal(data.edge_index, same_as.edge_index)):
        wrong.append("read on, but not the good folder's graph")
    return ("FAIL", "; ".join(wrong)) if wrong else ("handled", "")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("graphs")
    standins.elliptic(root / "elliptic", per_step=6)
    write_planetoid(root / "planetoid" / "tiny" / "raw")
    return {"elliptic": root / "elliptic", "planetoid": root / "planetoid"}


def test_the_battery_reads_the_notebooks_first_data_cell():
    cells = json.loads((REPO / "notebooks" / "gnn_node_classification.ipynb").read_text())["cells"]
    assert "kk.graphsets.load(run.data_dir()," in "".join("".join(c["source"]) for c in cells)


@pytest.mark.parametrize("layout", ["elliptic", "planetoid"])
def test_the_good_graph_folders_are_read(layout, good):
    assert outcome(good[layout]) == ("handled", "")


@pytest.mark.parametrize("layout, mutation", [("elliptic", m) for m in ELLIPTIC_MUTATIONS]
                         + [("planetoid", m) for m in PLANETOID_MUTATIONS], ids=lambda m: getattr(m, "__name__", m))
def test_every_graph_mutation_is_handled_or_refused_by_name(layout, mutation, good, tmp_path, capsys):
    copy = tmp_path / good[layout].name / good[layout].name
    shutil.copytree(good[layout], copy)
    given, same = mutation(copy)
    verdict, said = outcome(given, graphsets.load(good[layout]) if same == SAME else None)
    with capsys.disabled():
        print(f"\n{layout} {mutation.__name__} | {verdict} | {said[:160]}", end="")
    assert verdict != "FAIL", said
    assert verdict == ("handled" if same == SAME else "refused"), said
