"""Graph helpers: built-in fraud-like graphs, Planetoid data, neighbour-sampled batches.

PyG's ``NeighborLoader`` needs pyg-lib or torch-sparse, neither of which installs
from PyPI here; ``NeighborSampler`` is the kit's own, vectorised in plain torch,
yielding the same kind of mini-batch (seed nodes first, ``batch_size`` set,
``n_id`` the global ids). Seeds go through ``make_loader``, so they are sharded
across DDP ranks and a mid-epoch resume continues with the next batch.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch


def _undirected(edges: torch.Tensor, n: int) -> torch.Tensor:
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    edges = edges[:, edges[0] != edges[1]]
    key = torch.unique(edges[0] * n + edges[1])
    return torch.stack([key // n, key % n])


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
    edge_index = _undirected(torch.cat([background, *rings], dim=1), nodes)
    x = torch.randn(nodes, features, generator=g)
    x[positives, :4] += 0.5  # weak on its own, strong once averaged over a ring
    split = torch.rand(nodes, generator=g)
    return Data(x=x, y=y, edge_index=edge_index, train_mask=split < 0.6,
                val_mask=(split >= 0.6) & (split < 0.8), test_mask=split >= 0.8)


def load_planetoid(folder: Path | str):
    """A Planetoid data set (ind.<name>.x, .y, .tx, .ty, .allx, .ally, .graph, .test.index)
    read offline with PyG's own class and its standard split.

    The raw files are copied to a writable temporary folder first (removed once the
    graph is in memory): Kaggle inputs are read-only and PyG writes its processed
    cache next to them. (The .graph file
    of this format is a pickle: load Planetoid data only from sources you trust.)
    """
    from torch_geometric.datasets import Planetoid
    found = sorted(Path(folder).rglob("ind.*.graph"))
    if not found:
        raise FileNotFoundError(f"{folder} holds no Planetoid files (ind.<name>.graph and friends)")
    raw = found[0].parent
    name = found[0].name.split(".")[1]
    with tempfile.TemporaryDirectory(prefix="planetoid-") as root:  # gone once loaded
        shutil.copytree(raw, Path(root) / name / "raw")
        return Planetoid(root, name=name)[0]


class NeighborSampler:
    """Sample a ``fanouts``-hop neighbourhood of seed nodes (without replacement).

    ``sample(seeds)`` returns a PyG ``Data`` with the seeds first: ``x``, ``y``,
    ``edge_index`` in local ids (messages flow from sampled neighbour to node),
    ``n_id`` (global ids) and ``batch_size`` = number of seeds.
    """

    def __init__(self, data, fanouts: list[int], seed: int = 0):
        n = data.num_nodes
        src, dst = data.edge_index
        order = torch.argsort(dst * n + src)
        self.nbr = src[order]  # neighbours grouped by the node they point to
        self.rowptr = torch.zeros(n + 1, dtype=torch.long)
        self.rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
        self.data, self.fanouts, self.n = data, list(fanouts), n
        self.generator = torch.Generator().manual_seed(seed)

    def _hop(self, frontier: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(targets, neighbours): up to ``k`` distinct neighbours of each frontier node."""
        deg = self.rowptr[frontier + 1] - self.rowptr[frontier]
        seg = torch.repeat_interleave(torch.arange(len(frontier)), deg)
        first = torch.repeat_interleave(self.rowptr[frontier] - torch.cumsum(deg, 0) + deg, deg)
        edge = first + torch.arange(len(seg))
        keys = seg.double() + torch.rand(len(seg), generator=self.generator, dtype=torch.double)
        edge, seg = edge[torch.argsort(keys)], seg[torch.argsort(keys)]
        start = torch.cumsum(deg, 0) - deg
        rank = torch.arange(len(seg)) - start[seg]
        keep = rank < k
        return frontier[seg[keep]], self.nbr[edge[keep]]

    def sample(self, seeds: torch.Tensor):
        from torch_geometric.data import Data
        seeds = torch.as_tensor(seeds, dtype=torch.long)
        local = torch.full((self.n,), -1, dtype=torch.long)
        local[seeds] = torch.arange(len(seeds))
        n_id, rows, cols, frontier = [seeds], [], [], seeds
        count = len(seeds)
        for k in self.fanouts:
            targets, nbrs = self._hop(frontier, k)
            fresh = torch.unique(nbrs[local[nbrs] < 0])
            local[fresh] = torch.arange(count, count + len(fresh))
            count += len(fresh)
            n_id.append(fresh)
            rows.append(local[targets])
            cols.append(local[nbrs])
            frontier = fresh
        n_id = torch.cat(n_id)
        edge_index = torch.stack([torch.cat(cols), torch.cat(rows)])  # neighbour -> node
        return Data(x=self.data.x[n_id], y=self.data.y[n_id], edge_index=edge_index,
                    n_id=n_id, batch_size=len(seeds))

    __call__ = sample


def pyg_loader_available() -> bool:
    """PyG's NeighborLoader needs pyg-lib or torch-sparse (neither installs from PyPI here)."""
    import torch_geometric.typing as t
    return bool(t.WITH_PYG_LIB or t.WITH_TORCH_SPARSE)


def seed_loader(data, mask: torch.Tensor, fanouts: list[int], batch_size: int, *,
                train: bool = True, seed: int = 0, device="cpu", backend: str = "auto"):
    """Mini-batches of sampled neighbourhoods around the nodes in ``mask``.

    backend "kit" (the default where no extension is importable): seeds go through
    ``make_loader``, so they are sharded over DDP ranks and a mid-epoch resume
    continues with the next batch. "pyg" (the default where pyg-lib or torch-sparse
    is importable): PyG's NeighborLoader over this rank's shard of the seeds.
    """
    if backend not in ("auto", "kit", "pyg"):
        raise ValueError(f"backend={backend!r} must be 'auto', 'kit' or 'pyg'")
    seeds = mask.nonzero().view(-1)
    if backend == "pyg" or (backend == "auto" and pyg_loader_available()):
        from torch_geometric.loader import NeighborLoader

        from .ranks import context
        ctx = context()
        return NeighborLoader(data, num_neighbors=fanouts, batch_size=batch_size, shuffle=train,
                              input_nodes=seeds[ctx.rank::ctx.world_size])
    from .data import make_loader
    sampler = NeighborSampler(data, fanouts, seed)
    return make_loader(seeds, batch_size, train=train, seed=seed, device=device, num_workers=0,
                       collate_fn=lambda ids: sampler(torch.stack(ids) if isinstance(ids, list)
                                                      else ids), drop_last=False)
