import pytest
import torch

from kagglekit import graph


@pytest.fixture(scope="module")
def data():
    return graph.synthetic(3000, seed=1)


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


def test_a_planetoid_folder_is_read_offline_with_pygs_own_class(tmp_path):
    """Writes a tiny data set in the Planetoid raw format, then loads it through PyG."""
    import pickle

    import numpy as np
    import scipy.sparse as sp
    rng = np.random.default_rng(0)
    n_train, n_test, n_all, f, c = 4, 3, 520, 5, 3  # PyG puts 500 validation nodes after train

    def onehot(k):
        return np.eye(c)[rng.integers(0, c, k)]

    raw = tmp_path / "data" / "tiny" / "raw"
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
    for p in [raw, *raw.iterdir()]:
        p.chmod(0o555 if p.is_dir() else 0o444)  # read-only, as Kaggle inputs are
    data = graph.load_planetoid(tmp_path / "data")
    assert data.num_nodes == n_all + n_test and data.num_features == f
    assert int(data.train_mask.sum()) == n_train and int(data.test_mask.sum()) > 0


@pytest.mark.skipif(not graph.pyg_loader_available(), reason="PyG's NeighborLoader needs pyg-lib "
                    "or torch-sparse, neither installs from PyPI here")
def test_pygs_loader_and_the_kits_sampler_reach_a_similar_score():  # pragma: no cover
    from kagglekit.tasks import gnn
    data = graph.synthetic(3000, seed=0)
    cfg = {"hidden": 32, "dropout": 0.2, "fanouts": [10, 5], "batch_size": 256, "lr": 1e-2,
           "weight_decay": 1e-4, "epochs": 6, "precision": "fp32", "seed": 0}
    scores = {b: gnn.finetune({**cfg, "sampler": b}, data, None)["test_pr_auc"] for b in ("kit", "pyg")}
    assert abs(scores["kit"] - scores["pyg"]) < 0.1, scores


def test_the_kit_sampler_backend_shards_seeds_through_make_loader(data):
    loader = graph.seed_loader(data, data.train_mask, [5], 64, backend="kit")
    seen = torch.cat([b.n_id[: b.batch_size] for b in loader])
    assert sorted(seen.tolist()) == sorted(data.train_mask.nonzero().view(-1).tolist())
