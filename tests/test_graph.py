import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import graph, graphsets


@pytest.fixture(scope="module")
def data():
    return graphsets.synthetic(3000, seed=1)


def test_every_sampled_neighbour_is_real_fanout_is_respected_and_seeds_come_first(data):
    sampler = graph.NeighborSampler(data, [4, 3], seed=0)
    seeds = torch.tensor([5, 17, 99, 1234])
    batch = sampler(seeds)
    assert torch.equal(batch.n_id[:4], seeds) and batch.batch_size == 4
    assert len(torch.unique(batch.n_id)) == len(batch.n_id)
    real = set(zip(*data.edge_index.tolist()))
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    assert all((int(s), int(d)) in real for s, d in zip(src, dst))
    # hop 1: at most 4 sampled neighbours per seed, distinct (sampling without replacement)
    hop1 = [(int(s), int(d)) for s, d in zip(src, dst) if int(d) in set(seeds.tolist())]
    for seed in seeds.tolist():
        mine = [s for s, d in hop1 if d == seed]
        degree = int((data.edge_index[1] == seed).sum())
        assert len(mine) == min(4, degree) and len(set(mine)) == len(mine)
    assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])


def test_sampling_is_deterministic_under_a_seed(data):
    a = graph.NeighborSampler(data, [5, 5], seed=3)(torch.arange(50))
    b = graph.NeighborSampler(data, [5, 5], seed=3)(torch.arange(50))
    c = graph.NeighborSampler(data, [5, 5], seed=4)(torch.arange(50))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert not torch.equal(a.n_id, c.n_id)


def test_the_builtin_graph_is_imbalanced_and_split(data):
    rate = data.y.float().mean().item()
    assert 0.03 < rate < 0.07
    masks = data.train_mask.long() + data.val_mask.long() + data.test_mask.long()
    assert bool((masks == 1).all())


def write_planetoid(raw, n_train: int = 4, n_test: int = 3, n_all: int = 520, f: int = 5, c: int = 3):
    """A tiny data set in the Planetoid raw format (ind.tiny.x, .y, .tx, .ty, .allx, .ally, .graph
    pickled, .test.index as text) in ``raw``: PyG puts 500 validation nodes after the training ones."""
    import pickle

    import numpy as np
    import scipy.sparse as sp
    rng = np.random.default_rng(0)

    def onehot(k):
        return np.eye(c)[rng.integers(0, c, k)]

    raw.mkdir(parents=True)
    objects = {"x": sp.csr_matrix(rng.random((n_train, f))), "y": onehot(n_train),
               "tx": sp.csr_matrix(rng.random((n_test, f))), "ty": onehot(n_test),
               "allx": sp.csr_matrix(rng.random((n_all, f))), "ally": onehot(n_all),
               "graph": {i: [(i + 1) % (n_all + n_test), (i + 2) % (n_all + n_test)]
                         for i in range(n_all + n_test)}}
    for name, obj in objects.items():
        with open(raw / f"ind.tiny.{name}", "wb") as fh:
            pickle.dump(obj, fh)
    (raw / "ind.tiny.test.index").write_text("\n".join(str(n_all + i) for i in range(n_test)))


def test_a_planetoid_folder_is_read_offline_with_pygs_own_class(tmp_path):
    n_train, n_test, n_all, f = 4, 3, 520, 5
    raw = tmp_path / "data" / "tiny" / "raw"
    write_planetoid(raw, n_train, n_test, n_all, f)
    for p in [raw, *raw.iterdir()]:
        p.chmod(0o555 if p.is_dir() else 0o444)  # read-only, as Kaggle inputs are
    data = graphsets.load_planetoid(tmp_path / "data")
    assert data.num_nodes == n_all + n_test and data.num_features == f
    assert int(data.train_mask.sum()) == n_train and int(data.test_mask.sum()) > 0


class SAGE(torch.nn.Module):
    """Two GraphSAGE layers and a linear head: a two-hop model, as the notebook's."""

    def __init__(self, features: int, outputs: int, hidden: int = 32):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.conv1, self.conv2 = SAGEConv(features, hidden), SAGEConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, outputs)

    def forward(self, x, edge_index):
        return self.head(F.relu(self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)))


def seed_loss(model, batch):
    out = model(batch.x, batch.edge_index)[: batch.batch_size, 0]
    return F.binary_cross_entropy_with_logits(out, batch.y[: batch.batch_size].float())


def test_with_fanouts_above_every_degree_the_sample_is_the_exact_k_hop_neighbourhood(data):
    """Against PyG's own ``k_hop_subgraph``: a fan-out no node's degree reaches samples the
    whole two-hop neighbourhood, and a two-layer model's seed logits on the sample equal
    its logits on the whole graph (nothing a seed needs is missing, nothing is counted twice)."""
    from torch_geometric.utils import degree, k_hop_subgraph
    most = int(degree(data.edge_index[1], data.num_nodes).max())
    seeds = data.train_mask.nonzero().view(-1)[:64]
    batch = graph.NeighborSampler(data, [most + 1, most + 1], seed=0)(seeds)
    exact = k_hop_subgraph(seeds, 2, data.edge_index, num_nodes=data.num_nodes)[0]
    assert set(batch.n_id.tolist()) == set(exact.tolist())
    torch.manual_seed(0)
    model = SAGE(data.num_features, 1).eval()
    whole = model(data.x, data.edge_index)[seeds]
    assert torch.allclose(model(batch.x, batch.edge_index)[: batch.batch_size], whole, atol=1e-5)


class Features(torch.nn.Module):
    """The same head on node features alone: what the graph adds is the difference."""

    def __init__(self, features: int):
        super().__init__()
        self.mlp = kk.models.MLP(features, 32, 1)

    def forward(self, x, edge_index):
        return self.mlp(x)


def test_the_kits_sampler_trains_a_model_that_beats_features_alone():
    """Mini-batches of sampled neighbourhoods learn the structure of the built-in graph
    (positives form rings): PR-AUC well above the same training on node features alone."""
    data = graphsets.synthetic(3000, seed=0)
    scores = {}
    for name, model in (("sage", SAGE(data.num_features, 1)), ("features", Features(data.num_features))):
        torch.manual_seed(0)
        loader = graph.seed_loader(data, data.train_mask, [10, 5], 256)
        kk.fit(model, torch.optim.Adam(model.parameters(), lr=1e-2), loader, seed_loss, epochs=6, progress=False,
               speed=kk.Speed(precision="fp32"))
        logits = kk.evaluate.node_logits(model, data, "cpu")[data.test_mask]
        scores[name] = kk.metrics.classification(logits, data.y[data.test_mask])["pr_auc"]
    assert scores["sage"] > scores["features"] + 0.15, scores


def test_a_sampled_batch_split_by_seeds_gives_each_seed_the_same_logits(data):
    torch.manual_seed(0)
    model = SAGE(data.num_features, 1).eval()
    batch = graph.NeighborSampler(data, [10, 5], seed=0)(data.train_mask.nonzero().view(-1)[:64])
    whole = model(batch.x, batch.edge_index)[: batch.batch_size]
    parts = kk.batches.split_batch(batch, 3)
    assert [p.batch_size for p in parts] == [22, 21, 21]
    assert all(p.num_nodes < batch.num_nodes for p in parts)  # the point: smaller batches
    pieces = torch.cat([model(p.x, p.edge_index)[: p.batch_size] for p in parts])
    assert torch.allclose(pieces, whole, atol=1e-5)  # every seed kept its two-hop neighbourhood
    assert torch.equal(torch.cat([p.n_id[: p.batch_size] for p in parts]), batch.n_id[:64])


def test_the_whole_graph_batch_is_the_plain_full_graph_loss(data):
    torch.manual_seed(0)
    model = SAGE(data.num_features, 1).eval()
    full = graph.FullBatch(data, data.train_mask, hops=2, repeats=3)
    assert len(full) == 3 and len(list(full)) == 3
    plain = model(data.x, data.edge_index)[data.train_mask, 0]
    loss = F.binary_cross_entropy_with_logits(plain, data.y[data.train_mask].float())
    assert torch.allclose(seed_loss(model, next(iter(full))), loss, atol=1e-6)


class OomAboveSeeds(SAGE):
    """Raises CUDA's out-of-memory error for graphs of more than ``limit`` nodes."""
    limit = 10_000

    def forward(self, x, edge_index):
        if x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated by the test)")
        return super().forward(x, edge_index)


def test_an_out_of_memory_on_a_graph_batch_backs_off_by_seeds_and_finishes(data):
    torch.manual_seed(0)
    model = OomAboveSeeds(data.num_features, 1)
    full = graph.FullBatch(data, data.train_mask, hops=2, repeats=2)
    OomAboveSeeds.limit = data.num_nodes - 1  # the whole graph does not fit, halves do
    result = kk.fit(model, torch.optim.Adam(model.parameters(), lr=1e-2), full, seed_loss,
                    epochs=2, progress=False)
    assert result.steps == 4 and result.stopped == "completed"
    seeds = int(data.train_mask.sum())
    assert result.oom_events == [{"step": 0, "per_gpu_batch": seeds // 2}]


def write_elliptic(folder, per_step=12, seed=0):
    """Files in the layout of Kaggle's ellipticco/elliptic-data-set (tools/standins.py: no
    header, txIds, edges within a time step, classes in another order), in ``folder``."""
    from kagglekit.tools import standins
    return standins.elliptic(folder.parent, per_step=per_step, seed=seed)


def test_elliptic_files_load_with_the_papers_temporal_split(tmp_path):
    labels, steps = write_elliptic(tmp_path / "elliptic_bitcoin_dataset")
    data = graphsets.load(tmp_path)
    tx = list(labels)
    expected = torch.tensor([{"1": 1, "2": 0, "unknown": -1}[labels[t]] for t in tx])
    assert torch.equal(data.y, expected)  # joined by txId, not by row order
    step = data.time_step
    assert int(step[data.train_mask].max()) <= 29 and int(step[data.val_mask].min()) >= 30
    assert int(step[data.val_mask].max()) <= 34 and int(step[data.test_mask].min()) >= 35
    assert not (data.train_mask & data.test_mask).any() and not (data.y[data.train_mask] < 0).any()
    unknown = data.y < 0
    assert not (unknown & (data.train_mask | data.val_mask | data.test_mask)).any()
    assert data.num_features == 165 and data.is_undirected()
    assert torch.equal(data.node_id, torch.tensor(tx))  # txIds kept for the submission
    period = graphsets.training_period(data)  # what a model may see before the test period
    assert int(period.time_step.max()) == 34 and period.num_nodes == int((step <= 34).sum())
    assert not period.test_mask.any() and int(period.train_mask.sum()) == int(data.train_mask.sum())
    folded = graphsets.labelled(data, period)  # what cross-validation splits: no test node, no unknown label
    assert torch.equal(folded, (data.train_mask | data.val_mask).nonzero().view(-1))
    assert (data.y[folded] >= 0).all() and int(step[folded].max()) <= 34


def test_a_loader_that_yields_no_batch_is_refused_by_name():
    from torch.utils.data import DataLoader, TensorDataset
    tiny = TensorDataset(torch.randn(100, 4), torch.zeros(100, dtype=torch.long))
    empty = DataLoader(tiny, batch_size=512, drop_last=True)
    model = kk.models.MLP(4, 8, 2)
    with pytest.raises(ValueError, match=r"yields no batch: 100 samples, batch_size=512, drop_last=True"):
        kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), empty,
               kk.supervised(F.cross_entropy), progress=False)
    kept = kk.make_loader(tiny, 512, num_workers=0)  # train=True drops the last batch...
    assert len(kept) == 1 and len(next(iter(kept))[0]) == 100  # ...never the only one
    assert len(kk.make_loader(TensorDataset(torch.randn(1030, 4)), 512, num_workers=0)) == 2


def test_the_kit_sampler_backend_shards_seeds_through_make_loader(data):
    loader = graph.seed_loader(data, data.train_mask, [5], 64)
    seen = torch.cat([b.n_id[: b.batch_size] for b in loader])
    assert sorted(seen.tolist()) == sorted(data.train_mask.nonzero().view(-1).tolist())


def test_loader_workers_sample_with_streams_of_their_own_and_runs_repeat():
    """Two components alike node for node (node i + n is node i's twin), a batch of each, one loader
    worker each: a forked worker inherits the training process's generator, so without a stream of
    its own the twin batches come out sampled alike; with one they differ, and a second run repeats
    the first."""
    from torch_geometric.data import Data
    n = 60
    src = torch.arange(n).repeat_interleave(n - 1)
    dst = torch.tensor([j for i in range(n) for j in range(n) if j != i])  # a complete graph, then its twin
    edges = torch.cat([torch.stack([src, dst]), torch.stack([src, dst]) + n], 1)
    data = Data(x=torch.zeros(2 * n, 1), y=torch.zeros(2 * n, dtype=torch.long), edge_index=edges)
    twins = [list(range(8)), list(range(n, n + 8))]

    def sampled():
        sampler = graph.NeighborSampler(data, [3, 3], seed=0)
        loader = torch.utils.data.DataLoader(torch.arange(2 * n), batch_sampler=twins, num_workers=2,
                                             collate_fn=lambda ids: sampler(torch.stack(ids)),
                                             generator=torch.Generator().manual_seed(0))  # as make_loader's
        return [(b.n_id % n, b.edge_index) for b in loader]
    (a_ids, a_edges), (b_ids, b_edges) = first = sampled()
    assert torch.equal(a_ids[:8], b_ids[:8])  # the twin seeds
    assert not (torch.equal(a_ids, b_ids) and torch.equal(a_edges, b_edges))  # sampled apart
    again = sampled()
    assert all(torch.equal(x, y) for one, two in zip(first, again) for x, y in zip(one, two))


def test_the_seed_loader_takes_its_order_seed_and_workers_as_asked(data):
    """Validation batches in the mask's order, training batches shuffled by ``seed`` (repeats with
    other seeds see other orders), the sampling in as many loader processes as asked."""
    mask = data.train_mask
    first = lambda loader: next(iter(loader)).n_id[:64]  # noqa: E731  # the first batch's seeds
    in_order = graph.seed_loader(data, mask, [3], 64, train=False, workers=0)
    assert in_order.num_workers == 0 and torch.equal(first(in_order), mask.nonzero().view(-1)[:64])
    orders = [first(graph.seed_loader(data, mask, [3], 64, seed=s, workers=0)) for s in (0, 0, 1)]
    assert torch.equal(orders[0], orders[1]) and not torch.equal(orders[0], orders[2])
    assert graph.seed_loader(data, mask, [3], 64, workers=2).num_workers == 2
