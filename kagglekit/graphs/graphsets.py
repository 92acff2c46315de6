"""Graphs to train on: the built-in fraud-like graph, and readers of known public layouts.

Every reader returns one PyG ``Data`` with ``x``, ``y`` and boolean ``train_mask``,
``val_mask``, ``test_mask``; nodes without a label carry ``y = -1`` and sit in no mask.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from . import graphcheck


def undirected(edges: torch.Tensor, n: int) -> torch.Tensor:
    """Both directions of every edge, without self-loops or duplicates (sorted)."""
    from torch_geometric.utils import remove_self_loops, to_undirected
    return to_undirected(remove_self_loops(edges)[0], num_nodes=n)


def synthetic(nodes: int = 20000, positive_rate: float = 0.05, features: int = 16,
              degree: int = 6, seed: int = 0):
    """An imbalanced binary node task whose signal lives in the structure (think fraud rings).

    Positives form rings of 8-24 nodes, densely linked among themselves; every node
    also has random background links. A positive's own features are only slightly
    shifted, so an MLP on node features alone does poorly, while averaging over
    neighbours (mostly ring members) reveals the ring. Train / val / test masks are
    a 60 / 20 / 20 random split.
    """
    from torch_geometric.data import Data
    g = torch.Generator().manual_seed(seed)
    y = torch.zeros(nodes, dtype=torch.long)
    order = torch.randperm(nodes, generator=g)
    positives = order[: int(positive_rate * nodes)]
    y[positives] = 1
    background = torch.randint(0, nodes, (2, nodes * degree // 2), generator=g)
    rings, start = [], 0
    while start < len(positives):
        size = int(torch.randint(8, 25, (1,), generator=g))
        members = positives[start:start + size]
        start += size
        if len(members) < 2:
            continue
        pairs = torch.randint(0, len(members), (2, len(members) * 8), generator=g)
        rings.append(members[pairs])
    edge_index = undirected(torch.cat([background, *rings], dim=1), nodes)
    x = torch.randn(nodes, features, generator=g)
    x[positives, :4] += 0.5  # weak on its own, strong once averaged over a ring
    split = torch.rand(nodes, generator=g)
    return Data(x=x, y=y, edge_index=edge_index, train_mask=split < 0.6,
                val_mask=(split >= 0.6) & (split < 0.8), test_mask=split >= 0.8)


def load_planetoid(folder: Path | str):
    """A Planetoid data set (ind.<name>.x, .y, .tx, .ty, .allx, .ally, .graph, .test.index)
    read offline with PyG's own class and its standard split (20 labels per class, 500
    validation and 1000 test nodes), the split of the GCN paper's published figures.

    The raw files are copied to a writable temporary folder first (removed once the
    graph is in memory): Kaggle inputs are read-only and PyG writes its processed
    cache next to them. (The .graph file of this format is a pickle: load Planetoid
    data only from sources you trust.)
    """
    import pickle

    from torch_geometric.datasets import Planetoid
    found = _planetoid(folder)
    if not found:
        raise graphcheck.GraphFileMissing(f"{folder} holds no Planetoid files (ind.<name>.graph and friends)")
    raw = found[0].parent
    name = found[0].name.split(".")[1]
    graphcheck.planetoid_files(raw, name)
    with tempfile.TemporaryDirectory(prefix="planetoid-") as root:  # gone once loaded
        shutil.copytree(raw, Path(root) / name / "raw")
        try:
            return Planetoid(root, name=name)[0]
        except (EOFError, pickle.UnpicklingError, ValueError, IndexError) as err:  # a file cut short or mixed up
            raise graphcheck.GraphDataError(f"{raw}: PyG could not read the Planetoid files ind.{name}.* "
                                            f"({type(err).__name__}: {err}): a file is cut short or from another "
                                            "data set; copy the eight files again") from None


def _planetoid(folder) -> list[Path]:
    """The Planetoid files' ``.graph`` (or, that one missing, ``.x``) under ``folder``."""
    return sorted(Path(folder).rglob("ind.*.graph")) or sorted(Path(folder).rglob("ind.*.x"))


ELLIPTIC = ("elliptic_txs_features.csv", "elliptic_txs_edgelist.csv", "elliptic_txs_classes.csv")


def _one_file(folder: Path, name: str) -> Path:
    found = sorted(Path(folder).rglob(name))
    if not found:
        raise graphcheck.GraphFileMissing(f"{folder} has no {name}: the Elliptic layout (Kaggle dataset "
                                          f"ellipticco/elliptic-data-set) is {', '.join(ELLIPTIC)}")
    return found[0]


def load_elliptic(folder: Path | str, train_until: int = 34, val_steps: int = 5):
    """The Elliptic Bitcoin transaction graph with the temporal split of its paper.

    Files (as Kaggle's ``ellipticco/elliptic-data-set`` and PyG's reader have them):
    ``elliptic_txs_features.csv`` without header (txId, time step 1-49, 165 features),
    ``elliptic_txs_edgelist.csv`` (txId1, txId2), ``elliptic_txs_classes.csv`` (txId,
    class "1" illicit / "2" licit / "unknown"). Labels are joined by txId, not by row.

    Split (Weber et al. 2019): train on time steps 1..``train_until``, test on the
    later ones; the last ``val_steps`` training steps are held out for validation
    (model selection stays in the past of the test period). Unknown nodes are in no
    mask (``y = -1``) but keep their edges: messages still flow through them.
    ``data.time_step`` keeps each node's step, ``data.node_id`` its txId, ``data.train_period``
    the nodes (labelled or not) of steps 1..``train_until``: the graph a model may see before
    the test period. Edges are made undirected.
    """
    import numpy as np
    import pandas as pd
    from torch_geometric.data import Data
    folder = Path(folder)
    features = graphcheck.features_table(_one_file(folder, ELLIPTIC[0]))
    tx_ids, steps = features[0].to_numpy(np.int64), features[1].to_numpy()
    position = pd.Series(np.arange(len(tx_ids)), index=tx_ids)
    classes_file = _one_file(folder, ELLIPTIC[2])
    y = torch.from_numpy(graphcheck.class_labels(classes_file, pd.read_csv(classes_file, dtype=str), tx_ids))
    edges_file = _one_file(folder, ELLIPTIC[1])
    ends = graphcheck.edge_ends(edges_file, pd.read_csv(edges_file), position)
    edge_index = undirected(torch.from_numpy(np.stack(ends).astype(np.int64)), len(tx_ids))
    step = torch.from_numpy(steps.astype(np.int64))
    labelled = y >= 0
    train_period = step <= train_until
    val = labelled & train_period & (step > train_until - val_steps)
    return Data(x=torch.from_numpy(features.iloc[:, 2:].to_numpy(np.float32)), y=y,
                edge_index=edge_index, time_step=step, node_id=torch.from_numpy(tx_ids.astype(np.int64)),
                train_period=train_period, train_mask=labelled & train_period & ~val,
                val_mask=val, test_mask=labelled & ~train_period)


def training_period(data, transductive: bool = False):
    """The graph a model may learn from: the nodes and edges of the training period for a
    temporal graph (Elliptic: steps 1-34), with their masks and ids; the whole graph for one
    without time (Planetoid, the built-in graph: transductive by their protocol), or when
    ``transductive``. ``full_id``: each node's index in ``data``."""
    if "train_period" not in data or transductive:
        data.full_id = torch.arange(data.num_nodes)
        return data
    period = data.subgraph(data.train_period)
    period.full_id = data.train_period.nonzero().view(-1)  # each node's index in the whole graph
    return period


def labelled(data, learn):
    """The labelled nodes outside the test set that the models may learn from (``learn``:
    ``training_period``'s graph), as indices of ``data``: what cross-validation splits."""
    nodes = ((data.train_mask | data.val_mask) & ~data.test_mask).nonzero().view(-1)
    return nodes[torch.isin(nodes, learn.full_id)]


def describe(data, learn, full_batch: bool) -> dict:
    """What a notebook logs about the graph (sizes, the split, what the models learn from: a
    temporal graph's training period), printed in one line with how batches are made."""
    stepped = "time_step" in learn
    facts = {"nodes": data.num_nodes, "edges": data.num_edges, "learn_nodes": learn.num_nodes,
             "learn_edges": learn.num_edges, "transductive": learn is data,
             "learn_max_time_step": int(learn.time_step.max()) if stepped else None}
    sizes = "/".join(f"{int(m.sum()):,}" for m in (data.train_mask, data.val_mask, data.test_mask))
    period = f", steps <= {facts['learn_max_time_step']}" if stepped else ""
    line = (f"{data.num_nodes:,} nodes, {data.num_edges:,} edges, {data.num_features} features, "
            f"{int(data.y.max()) + 1} classes; train/val/test nodes {sizes}; models learn from "
            f"{learn.num_nodes:,} nodes{period}; "
            f"{'whole graph per step' if full_batch else 'neighbour-sampled mini-batches'}")
    print(line)
    return facts


def load(folder: Path | str | None, **builtin):
    """The graph under ``folder`` by the layout found there (Planetoid or Elliptic);
    the built-in graph (``synthetic(**builtin)``) when ``folder`` is None."""
    if folder is None:
        return synthetic(**builtin)
    if any(Path(folder).rglob(ELLIPTIC[0])):
        return load_elliptic(folder)
    if _planetoid(folder):
        return load_planetoid(folder)
    raise graphcheck.GraphFileMissing(f"{folder} holds neither Planetoid files (ind.<name>.graph, ...) nor "
                                      f"the Elliptic layout ({', '.join(ELLIPTIC)})")
