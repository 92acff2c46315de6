"""The GNN notebook's speed switches, each timed against none of them (moved out of the notebook:
a study of how a step runs is not the notebook's pipeline).

``accumulate``, ``grad_checkpointing`` and ``compile`` change how a step runs, not what the
model learns. The model is the notebook's at its defaults (two GCN layers, 16 hidden units,
sparse input dropout) on the built-in fraud-like graph, trained on neighbour-sampled mini-batches
(``kk.graph.node_batches`` with ``full_batch=False``: the large-graph path the switches are for).
Each variant runs ``STEPS`` optimizer steps after as many warm-up steps (compilation, the
allocator), rounds alternate between the variants, and the median step time and the peak
memory (CUDA allocator on a GPU, resident high-water mark on a CPU) print as ratios against
"none" measured in the same run, with the time the training loop waits for its next batch (the
fit's step breakdown): the neighbour sampling off the loop, in loader workers, is what shortens
it; "all on" is every switch at once (and the neighbour sampling in
a loader process, the batches pinned on a GPU), as the seeds' write-ups turn them on together.
``--compile`` adds torch.compile, to "all on" too (minutes on a CPU).
"""
from __future__ import annotations

import statistics
import sys

import torch
from torch.nn import functional as F

import kagglekit as kk

STEPS, ROUNDS, BATCH, HOPS = 20, 3, 512, [10, 5]


def model_for(data):
    from torch_geometric.nn import GCNConv

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([GCNConv(data.num_features, 16), GCNConv(16, 16)])
            self.out, self.input_dropout = torch.nn.Linear(16, 1), kk.graph.SparseDropout(0.5)

        def forward(self, x, edge_index):
            x = self.input_dropout(x)
            for conv in self.convs:
                x = F.dropout(F.relu(conv(x, edge_index)), 0.5, self.training)
            return self.out(x)
    return GNN()


def node_loss(model, batch):
    logits = model(batch.x, batch.edge_index)[: batch.batch_size, 0]
    return F.binary_cross_entropy_with_logits(logits, batch.y[: batch.batch_size].float())


def timed(data, device, accumulate=1, grad_checkpointing=False, compile=False, workers=0) -> dict:
    torch.manual_seed(0)
    model = model_for(data)
    if grad_checkpointing:
        kk.accel.checkpoint_blocks(model.convs)
    loader = kk.graph.node_batches(data, data.train_mask, HOPS, BATCH, full_batch=False,
                                   steps_between_evals=STEPS * accumulate, seed=0, device=device, workers=workers)
    kk.memory.reset_peak_of(device)
    result = kk.fit(model, torch.optim.Adam(model.parameters(), lr=1e-2), loader, node_loss,
                    run=kk.Alone(device=device), progress=False,
                    **kk.loaders.schedule(2 * STEPS, loader, STEPS, accumulate),
                    speed=kk.Speed(compile="auto" if compile else "off"))
    last, before = result.history[-1], result.history[-2]  # the last interval: after the warm-up
    steady = last["seconds"] / (last["step"] - before["step"])
    wait = result.breakdown.get("median_s", {}).get("data_wait", 0.0)  # the loop waiting for its next batch
    return {"step_ms": 1e3 * steady, "wait_ms": 1e3 * wait, **kk.memory.peak_of(device)}


def main() -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = kk.graphsets.load(None, nodes=20000, positive_rate=0.05, seed=0)
    variants = {"none": {}, "accumulate=2": {"accumulate": 2}, "grad_checkpointing": {"grad_checkpointing": True}}
    variants["sampling in a worker"] = {"workers": 1}
    variants["sampling in 2 workers"] = {"workers": 2}
    variants["all on"] = {"accumulate": 2, "grad_checkpointing": True, "workers": 1}
    if "--compile" in sys.argv:
        variants["compile"] = {"compile": True}
        variants["all on"]["compile"] = True
    rows = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, switches in variants.items():
            rows[name].append(timed(data, device, **switches))
    none_ms = statistics.median(r["step_ms"] for r in rows["none"])
    none_mb = max(r["peak_mb"] or 0 for r in rows["none"])
    none_wait = statistics.median(r["wait_ms"] for r in rows["none"])
    print(f"GNN speed switches on {device}, {STEPS} steps x {ROUNDS} rounds, batch {BATCH}, fanouts {HOPS}")
    for name, measured in rows.items():
        ms = statistics.median(r["step_ms"] for r in measured)
        mb = max(r["peak_mb"] or 0 for r in measured)
        wait = statistics.median(r["wait_ms"] for r in measured)
        memory = f"peak {mb:8.1f} MB ({mb / none_mb:.2f}x none)" if none_mb else "peak memory not measured"
        print(f"  {name:21s} step {ms:7.2f} ms ({ms / none_ms:.2f}x none), the loop waits {wait:6.2f} ms a step "
              f"({wait / none_wait:.2f}x none)  {memory}")


if __name__ == "__main__":
    main()
