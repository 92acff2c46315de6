"""The GNN notebook's training on the real Cora files: kit against a plain PyG loop.

Same GCN (two GCNConv layers and a linear head, the notebook's model at its defaults),
same data, same 200 full-graph optimizer steps, a validation score every 10 steps and
the best-validation weights kept by both. The kit's side is what the notebook runs:
``kk.fit`` over ``kk.graph.FullBatch`` with ``kk.loaders.schedule``, ``kk.evaluate.nodes``
(scikit-learn scores), checkpoints every evaluation, ``restore_best``. The plain side
is the 20-line loop of PyG's examples, with the best weights copied in memory. Rounds
alternate; the ratio of medians and the median of per-round ratios are printed (goal:
kit / plain <= 1.1), with the test accuracy of both.
"""
from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import kagglekit as kk

CORA = Path(__file__).resolve().parents[2] / "shared" / "data" / "planetoid" / "Cora"
STEPS, EVERY, ROUNDS = 200, 10, 9


class GCN(nn.Module):
    def __init__(self, features: int, classes: int, hidden: int = 64, dropout: float = 0.5):
        super().__init__()
        from torch_geometric.nn import GCNConv
        self.conv1, self.conv2 = GCNConv(features, hidden), GCNConv(hidden, hidden)
        self.head, self.dropout = nn.Linear(hidden, classes), dropout

    def forward(self, x, edge_index):
        x = F.dropout(F.relu(self.conv1(x, edge_index)), self.dropout, self.training)
        x = F.dropout(F.relu(self.conv2(x, edge_index)), self.dropout, self.training)
        return self.head(x)


def test_accuracy(model, data) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


def plain(data, classes: int, seed: int) -> tuple[float, float]:
    started = time.perf_counter()
    torch.manual_seed(seed)
    model = GCN(data.num_features, classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best, best_state = -1.0, None
    for step in range(STEPS):
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
        if (step + 1) % EVERY == 0:
            model.eval()
            with torch.no_grad():
                pred = model(data.x, data.edge_index).argmax(1)
            val = float((pred[data.val_mask] == data.y[data.val_mask]).float().mean())
            if val > best:
                best, best_state = val, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    return time.perf_counter() - started, test_accuracy(model, data)


def kit(data, classes: int, seed: int, folder: Path) -> tuple[float, float]:
    started = time.perf_counter()
    torch.manual_seed(seed)
    model = GCN(data.num_features, classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    loader = kk.graph.FullBatch(data, data.train_mask, hops=2, repeats=EVERY)

    def loss(model, batch):
        return F.cross_entropy(model(batch.x, batch.edge_index)[: batch.batch_size], batch.y[: batch.batch_size])
    checkpoints = kk.CheckpointManager(folder, monitor="val_accuracy", mode="max")
    kk.fit(model, optimizer, loader, loss, run=kk.Alone(resume=False, config={"seed": seed}),
           evaluate=kk.evaluate.nodes(data, data.val_mask, "cpu"), checkpoints=checkpoints, progress=False,
           **kk.loaders.schedule(STEPS, loader, EVERY))
    checkpoints.restore_best(model)
    return time.perf_counter() - started, test_accuracy(model, data)


def main() -> int:
    if not CORA.is_dir():
        print(f"gnn_cora: no Cora files at {CORA} (../shared/data/planetoid beside the repo)")
        return 0
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    data = kk.graphsets.load_planetoid(CORA)
    classes = int(data.y.max()) + 1
    times = {"plain": [], "kit": []}
    accuracy = {"plain": [], "kit": []}
    with tempfile.TemporaryDirectory(prefix="gnn-cora-") as tmp:
        for r in range(ROUNDS):
            for name in (("plain", "kit") if r % 2 == 0 else ("kit", "plain")):
                seconds, acc = plain(data, classes, r) if name == "plain" else \
                    kit(data, classes, r, Path(tmp) / f"r{r}")
                times[name].append(seconds)
                accuracy[name].append(acc)
    med = {k: statistics.median(v) for k, v in times.items()}
    print("rounds:", {k: [round(s, 2) for s in v] for k, v in times.items()})
    for name in ("plain", "kit"):
        print(f"{name:5s}: median {med[name]:.2f} s for {STEPS} steps ({ROUNDS} rounds); "
              f"test accuracy mean {statistics.fmean(accuracy[name]):.4f}")
    paired = statistics.median(k / p for k, p in zip(times["kit"], times["plain"]))
    print(f"kit / plain = {med['kit'] / med['plain']:.3f} (ratio of medians), {paired:.3f} "
          "(median of per-round ratios); goal <= 1.1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
