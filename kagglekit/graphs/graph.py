"""Graph batches: neighbour-sampled or full-graph node batches, and edge batches for
link reconstruction that say how they split for the OOM back-off. (Readers: ``graphsets``;
how node batches split: ``parallel.batches``.)

PyG's ``NeighborLoader`` needs pyg-lib or torch-sparse, neither of which installs
from PyPI (nor is in Kaggle's image); ``NeighborSampler`` is the kit's own, vectorised in plain torch,
yielding the same kind of mini-batch (seed nodes first, ``batch_size`` set,
``n_id`` the global ids). Seeds go through ``make_loader``, so they are sharded
across DDP ranks and a mid-epoch resume continues with the next batch.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, NamedTuple

import torch

from ..parallel import batches, ranks


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
        self.data, self.fanouts, self.n, self.seed = data, list(fanouts), n, seed
        self.generator = torch.Generator().manual_seed(seed)
        self._worker: tuple[int, torch.Generator] | None = None

    def _stream(self) -> torch.Generator:
        """The random stream of this process: in a loader worker, one of its own (a forked worker
        inherits the training process's generator, and two workers would draw the same numbers for
        their batches), seeded by the worker's seed, which the loader draws from its own seeded
        generator: runs repeat, whatever the number of workers."""
        info = torch.utils.data.get_worker_info()
        if info is None:
            return self.generator
        if self._worker is None or self._worker[0] != info.seed:
            self._worker = (info.seed, torch.Generator().manual_seed((info.seed + self.seed) % 2**63))
        return self._worker[1]

    def _hop(self, frontier: torch.Tensor, k: int, stream: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(targets, neighbours): up to ``k`` distinct neighbours of each frontier node."""
        deg = self.rowptr[frontier + 1] - self.rowptr[frontier]
        seg = torch.repeat_interleave(torch.arange(len(frontier)), deg)
        first = torch.repeat_interleave(self.rowptr[frontier] - torch.cumsum(deg, 0) + deg, deg)
        edge = first + torch.arange(len(seg))
        keys = seg.double() + torch.rand(len(seg), generator=stream, dtype=torch.double)
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
        count, stream = len(seeds), self._stream()
        for k in self.fanouts:
            targets, nbrs = self._hop(frontier, k, stream)
            fresh = torch.unique(nbrs[local[nbrs] < 0])
            local[fresh] = torch.arange(count, count + len(fresh))
            count += len(fresh)
            n_id.append(fresh)
            rows.append(local[targets])
            cols.append(local[nbrs])
            frontier = fresh
        nodes = torch.cat(n_id)
        edge_index = torch.stack([torch.cat(cols), torch.cat(rows)])  # neighbour -> node
        return Data(x=self.data.x[nodes], y=self.data.y[nodes], edge_index=edge_index,
                    n_id=nodes, batch_size=len(seeds), hops=len(self.fanouts))

    __call__ = sample


def seed_loader(data, mask: torch.Tensor, fanouts: list[int], batch_size: int, *,
                train: bool = True, seed: int = 0, device="cpu", workers: int | None = None):
    """Mini-batches of sampled neighbourhoods around the nodes in ``mask``: the seeds go
    through ``make_loader``, so they are sharded over DDP ranks and a mid-epoch resume
    continues with the next batch; ``workers``: sampling in that many loader processes, off the
    training loop (None: as many as ``make_loader`` gives a process: NUM_WORKERS, else the CPUs
    per GPU; 0: in the training process). (PyG's NeighborLoader needs pyg-lib or torch-sparse,
    which neither PyPI nor Kaggle's image has.)"""
    from ..parallel.loaders import make_loader
    seeds = mask.nonzero().view(-1)
    sampler = NeighborSampler(data, fanouts, seed)
    return make_loader(seeds, batch_size,  # type: ignore[arg-type]  # a tensor is indexable
                       train=train, seed=seed, device=device, num_workers=workers,
                       collate_fn=lambda ids: sampler(torch.stack(ids) if isinstance(ids, list)
                                                      else ids), drop_last=False)


class SparseDropout(torch.nn.Module):
    """Dropout on input features that are mostly zeros (bag-of-words): a zero stays a zero, so
    drawing only for the nonzero entries (the GCN paper's sparse dropout) gives what dense
    dropout gives, several times faster on a CPU (CiteSeer: 12M entries, 1% nonzero). The
    nonzero entries of the last input tensor are kept (the whole-graph batch is the same tensor
    every step); dense features (Elliptic's) take plain dropout."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self._seen: weakref.ref | None = None
        self._index: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if self._seen is None or self._seen() is not x:  # found once per input tensor
            rows, cols = x.nonzero(as_tuple=True)
            self._seen, self._index = weakref.ref(x), (rows, cols) if len(rows) < x.numel() / 4 else None
        if self._index is None:
            return torch.nn.functional.dropout(x, self.p, True)
        rows, cols = self._index
        keep = torch.rand(rows.numel(), device=x.device) >= self.p
        out = torch.zeros_like(x)
        out[rows[keep], cols[keep]] = x[rows[keep], cols[keep]] / (1 - self.p)
        return out


class FullBatch:
    """The whole graph as every batch, for graphs that fit on the GPU (Cora, PubMed, ...).

    The nodes of ``mask`` (this rank's share under DDP) come first and ``batch_size``
    says how many, as in a sampled batch: one loss, ``out[:batch.batch_size]``, serves
    both. Each pass yields the batch ``repeats`` times: ``repeats`` optimizer steps
    between evaluations, not one step per "epoch". The batch is moved to ``device`` once.
    """

    def __init__(self, data, mask: torch.Tensor, hops: int, repeats: int = 1, device="cpu"):
        seeds = mask.nonzero().view(-1)[ranks.rank()::ranks.world_size()]
        rest = torch.ones(data.num_nodes, dtype=torch.bool)
        rest[seeds] = False
        order = torch.cat([seeds, rest.nonzero().view(-1)])
        self.batch = batches.induced(data, order, len(seeds), hops).to(device)
        self.repeats = repeats

    def __len__(self) -> int:
        return self.repeats

    def __iter__(self):
        return itertools.repeat(self.batch, self.repeats)


def node_batches(data, mask: torch.Tensor, fanouts: list[int], batch_size: int, *,
                 full_batch: bool, steps_between_evals: int = 1, seed: int = 0, device="cpu",
                 workers: int | None = None):
    """Training batches around the nodes of ``mask``: the whole graph (``FullBatch``)
    when ``full_batch``, else neighbour-sampled mini-batches (``seed_loader``, sampled in
    ``workers`` loader processes)."""
    if full_batch:
        return FullBatch(data, mask, len(fanouts), steps_between_evals, device)
    return seed_loader(data, mask, fanouts, batch_size, seed=seed, device=device, workers=workers)


class LinkBatch(NamedTuple):
    """An edge mini-batch for link reconstruction: the sampled neighbourhood of the pairs' nodes
    (those nodes first), the positive pairs and as many negative ones, each (2, E) in local ids
    of the neighbourhood."""
    graph: Any  # torch_geometric's Data
    positive: torch.Tensor
    negative: torch.Tensor

    @property
    def batch_size(self) -> int:
        """Positive pairs: what the loss averages over (each with its negative)."""
        return self.positive.shape[1]

    def memory_split(self, parts: int) -> list[LinkBatch]:
        """Cut by pairs (a positive with its negative), each part re-induced on the nodes its
        pairs read, so the part's scores are the whole batch's for those pairs."""
        out, hops = [], batches.hops_of(self.graph)
        for pos, neg in zip(self.positive.tensor_split(parts, dim=1),
                            self.negative.tensor_split(parts, dim=1)):
            seeds, local = torch.unique(torch.cat([pos, neg], 1), return_inverse=True)
            order = batches.reach(seeds, hops, self.graph.edge_index, self.graph.num_nodes)
            graph = batches.induced(self.graph, order, len(seeds), hops)  # seeds keep ids 0..k-1
            out.append(LinkBatch(graph, local[:, : pos.shape[1]], local[:, pos.shape[1]:]))
        return out


def link_batches(data, batch_size: int, fanouts: list[int], seed: int, device):
    """Edge mini-batches for link reconstruction (``LinkBatch``): memory bounded by the batch,
    negatives drawn from the batch's ids (the same ones after a resume)."""
    from ..parallel.loaders import make_loader
    sampler = NeighborSampler(data, fanouts, seed)
    n = data.num_nodes

    def collate(ids):
        ids = torch.stack(ids) if isinstance(ids, list) else ids
        pos = data.edge_index[:, ids]
        g = torch.Generator().manual_seed(int(ids.sum()) + seed)
        neg = torch.randint(0, n, pos.shape, generator=g)
        nodes, inverse = torch.unique(torch.cat([pos, neg], 1), return_inverse=True)
        return LinkBatch(sampler(nodes), inverse[:, : pos.shape[1]], inverse[:, pos.shape[1]:])

    edges = torch.arange(data.edge_index.shape[1])
    return make_loader(edges, min(batch_size, len(edges)),  # type: ignore[arg-type]  # a tensor is indexable
                       seed=seed, device=device,
                       num_workers=0, collate_fn=collate)
