"""What a batch is made of: how many samples it holds, and how it splits when memory runs out.

The OOM back-off cuts every batch of a step into ``parts`` chunks and weights each chunk's loss
by its share of the batch's samples, so that the step's gradient is the unsplit step's for any
loss that is a mean over samples (the kit's and the notebooks' are). Every batch the kit and the
notebooks produce splits:

- tensors, and tuples, lists, named tuples and dicts of them (forecast windows, Vesuvius
  patches, token-id dicts): along dim 0;
- a PyG ``Batch`` of graphs: by graph;
- a PyG node batch (seed nodes first, ``batch_size`` and ``hops`` set): by seed nodes, each part
  the subgraph its seeds read (``split_node_batch``);
- any object with a ``memory_split(parts)`` method (the GNN's link batches, ``graph.LinkBatch``):
  by its own rule. Such an object gives its sample count as ``batch_size``.
"""
from __future__ import annotations

import torch


def batch_size(batch) -> int:
    """Samples in a batch: a tensor's first dimension, an object's own ``batch_size`` (a node
    batch's seeds, a link batch's positive pairs), a PyG ``Batch``'s graphs, else the first
    tensor's first dimension in a tuple, list or dict."""
    if isinstance(batch, torch.Tensor):  # the common cases first: this runs every step
        return batch.shape[0]
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0].shape[0]
    own = getattr(batch, "batch_size", None)
    if isinstance(own, int):
        return own
    if isinstance(getattr(batch, "num_graphs", None), int):  # a PyG Batch of graphs
        return batch.num_graphs
    if isinstance(batch, (list, tuple)) and batch:
        return batch_size(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_size(next(iter(batch.values())))
    return 1


def split_batch(batch, parts: int) -> list:
    """``batch`` cut into ``parts`` chunks (see the module's docstring for each kind)."""
    if parts == 1:
        return [batch]
    if hasattr(batch, "memory_split"):
        return batch.memory_split(parts)
    if isinstance(batch, torch.Tensor):
        return list(torch.tensor_split(batch, parts))
    if hasattr(batch, "to_data_list") and isinstance(getattr(batch, "num_graphs", None), int):
        return [type(batch).from_data_list(batch.index_select(ids))  # (its batch_size is num_graphs)
                for ids in torch.arange(batch.num_graphs).tensor_split(parts)]
    if isinstance(getattr(batch, "batch_size", None), int) and hasattr(batch, "edge_index"):
        return split_node_batch(batch, parts)
    if isinstance(batch, (list, tuple)):
        columns = [split_batch(b, parts) for b in batch]
        rows = [[col[i] for col in columns] for i in range(parts)]
        return [type(batch)(*row) if hasattr(batch, "_fields") else type(batch)(row) for row in rows]
    if isinstance(batch, dict):
        by_key = {k: split_batch(v, parts) for k, v in batch.items()}
        return [{k: v[i] for k, v in by_key.items()} for i in range(parts)]
    raise TypeError(f"cannot split a batch of type {type(batch).__name__} for the OOM back-off: "
                    "give it a memory_split(parts) method and a batch_size, or pass "
                    "oom_backoff=False")


def chunk_weights(batch, chunks: list) -> list[float]:
    """Each chunk's share of the batch's samples: the weight of its loss, so that the weighted
    losses of the chunks sum to the batch's mean loss."""
    if len(chunks) == 1:
        return [1.0]
    total = batch_size(batch)
    return [batch_size(c) / total for c in chunks]


def hops_of(batch) -> int:
    """The layers a node batch was sampled for (``hops``, or PyG NeighborLoader's counts)."""
    if isinstance(getattr(batch, "hops", None), int):
        return batch.hops
    if getattr(batch, "num_sampled_nodes", None) is not None:
        return len(batch.num_sampled_nodes) - 1
    raise TypeError("cannot split a graph batch without knowing its hops: set batch.hops "
                    "(the layers of the model) for the OOM back-off")


def induced(batch, order: torch.Tensor, batch_size: int, hops: int):
    """PyG's ``Data.subgraph`` on the nodes ``order`` (local ids, relabelled in that order)
    as a node batch: its first ``batch_size`` nodes are the seeds, ``n_id`` their global ids."""
    out = batch.subgraph(order)
    for stale in ("num_sampled_nodes", "num_sampled_edges"):  # PyG's per-hop counts of the whole
        if stale in out:
            del out[stale]
    out.batch_size, out.hops = batch_size, hops
    if "n_id" not in out:
        out.n_id = order
    return out


def reach(seeds: torch.Tensor, hops: int, edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``seeds`` first, then every node ``hops + 1`` hops upstream of them.

    ``hops`` layers read the features of nodes ``hops`` away; the extra hop brings every edge
    into those nodes, so each keeps its in-degree, which GCN's symmetric normalisation reads:
    the seeds' outputs are then the whole batch's, not only for mean aggregation."""
    from torch_geometric.utils import k_hop_subgraph
    reached = k_hop_subgraph(seeds, hops + 1, edge_index, num_nodes=num_nodes)[0]
    return torch.cat([seeds, reached[~torch.isin(reached, seeds)]])


def split_node_batch(batch, parts: int) -> list:
    """A node batch cut into ``parts`` batches by its seed nodes, each the subgraph its seeds
    read (``reach``): the mean of the parts' losses is the whole batch's at a fraction of its
    memory."""
    hops = hops_of(batch)
    seeds = torch.arange(batch.batch_size, device=batch.edge_index.device)
    return [induced(batch, reach(part, hops, batch.edge_index, batch.num_nodes), len(part), hops)
            for part in seeds.tensor_split(parts)]
