"""The OOM back-off for every kind of batch the kit and the notebooks produce.

Each test trains one step twice from the same weights, with SGD at lr 1 (the step is the
gradient): once whole, once with a stand-in that raises CUDA's out-of-memory error for a batch
above a size, as a card too small would. The back-off must cut the batch and end with the
unsplit step's weights. Batch sizes are odd, so the chunks differ in size: a chunk's loss must
weigh by its samples, not by 1 / chunks."""
import copy

import pytest
import torch
from test_segmentation import notebook_defs
from torch import nn
from torch.nn import functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCNConv, global_mean_pool

import kagglekit as kk
from kagglekit import graph, graphsets
from kagglekit.parallel.batches import batch_size


def _oom_above(limit: int, loss_fn):
    """``loss_fn``, raising CUDA's out-of-memory error for batches of more than ``limit``."""
    def loss(model, batch):
        if batch_size(batch) > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated by the test)")
        return loss_fn(model, batch)
    return loss


def _one_step(model, batch, loss_fn) -> tuple[dict, list]:
    model = copy.deepcopy(model)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=1.0), [batch], loss_fn, run=kk.Alone(device="cpu"),
                    epochs=1, progress=False, speed=kk.Speed(precision="fp32"))
    return model.state_dict(), result.oom_events


def _same_step_when_split(model, batch, loss_fn, limit: int, splits: int = 1):
    whole, _ = _one_step(model, batch, loss_fn)
    split, events = _one_step(model, batch, _oom_above(limit, loss_fn))
    assert len(events) == splits, events  # the back-off ran (each event halves the batch)
    for key in whole:
        torch.testing.assert_close(split[key], whole[key], rtol=1e-5, atol=1e-6)


# ---- tensors: forecast windows, Vesuvius patches, token ids ---------------------------------

class Forecaster(nn.Module):
    """The forecast notebook's shape of model: an LSTM over the window, the horizon at once."""

    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(3, 8, batch_first=True), nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def test_forecast_windows():
    torch.manual_seed(0)
    batch = (torch.randn(13, 24, 3), torch.randn(13, 5))
    _same_step_when_split(Forecaster(), batch, kk.supervised(F.mse_loss), limit=7)


def test_vesuvius_patches_with_unlabelled_voxels():
    """The notebook's own loss (per patch, label 2 ignored) on patches of the U-Net's shape."""
    surface_loss = notebook_defs("surface_loss")["surface_loss"]
    torch.manual_seed(0)
    images = torch.rand(5, 1, 8, 8, 8)
    labels = torch.randint(0, 3, (5, 1, 8, 8, 8)).to(torch.uint8)  # 0, 1 and 2 (unlabelled)
    model = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.GELU(), nn.Conv3d(4, 1, 1))
    _same_step_when_split(model, (images, labels), lambda m, b: surface_loss(m(b[0]), b[1]),
                          limit=2, splits=2)


class TokenClassifier(nn.Module):
    """Token ids to a class, masked mean over the real tokens (a transformer's batch shape)."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 8), nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).float()
        return self.head((self.embed(input_ids) * mask).sum(1) / mask.sum(1))


def test_dict_batches_of_token_ids():
    torch.manual_seed(0)
    lengths = torch.randint(3, 12, (9,))
    batch = {"input_ids": torch.randint(1, 50, (9, 12)),
             "attention_mask": (torch.arange(12) < lengths[:, None]).long(),
             "labels": torch.randint(0, 3, (9,))}

    def loss(model, b):
        return F.cross_entropy(model(b["input_ids"], b["attention_mask"]), b["labels"])
    _same_step_when_split(TokenClassifier(), batch, loss, limit=5)


# ---- graphs: node batches, link batches, batches of graphs ---------------------------------

class GCN(nn.Module):
    """Two GCN layers: symmetric normalisation reads every node's in-degree."""

    def __init__(self, features, outputs):
        super().__init__()
        self.first, self.second = GCNConv(features, 16), GCNConv(16, outputs)

    def forward(self, x, edge_index):
        return self.second(F.relu(self.first(x, edge_index)), edge_index)


@pytest.fixture(scope="module")
def data():
    return graphsets.synthetic(600, seed=2)


def _node_loss(model, batch):
    logits = model(batch.x, batch.edge_index)[: batch.batch_size, 0]
    return F.binary_cross_entropy_with_logits(logits, batch.y[: batch.batch_size].float())


def test_sampled_node_batches(data):
    torch.manual_seed(0)
    batch = graph.NeighborSampler(data, [5, 3], seed=0)(data.train_mask.nonzero().view(-1)[:41])
    _same_step_when_split(GCN(data.num_features, 1), batch, _node_loss, limit=30)


def test_the_whole_graph_batch(data):
    torch.manual_seed(0)
    batch = next(iter(graph.FullBatch(data, data.train_mask, hops=2)))
    _same_step_when_split(GCN(data.num_features, 1), batch, _node_loss, limit=batch.batch_size - 1)


def _link_loss(encoder, batch):
    """The GNN notebook's link reconstruction loss."""
    g, positive, negative = batch
    z = encoder(g.x, g.edge_index)
    score = lambda pairs: (z[pairs[0]] * z[pairs[1]]).sum(-1)  # noqa: E731
    return (F.binary_cross_entropy_with_logits(score(positive), torch.ones(positive.shape[1]))
            + F.binary_cross_entropy_with_logits(score(negative), torch.zeros(negative.shape[1])))


def test_link_batches_split_by_pairs_with_their_subgraphs(data):
    torch.manual_seed(0)
    batch = next(iter(graph.link_batches(data, 75, [5, 3], seed=0, device="cpu")))
    assert batch.batch_size == 75
    parts = kk.batches.split_batch(batch, 2)
    assert all(p.graph.num_nodes < batch.graph.num_nodes for p in parts)  # the point: smaller
    _same_step_when_split(GCN(data.num_features, 8), batch, _link_loss, limit=50)


def test_batches_of_graphs():
    torch.manual_seed(0)
    graphs = [Data(x=torch.randn(n, 4), edge_index=torch.randint(0, n, (2, 2 * n)),
                   y=torch.tensor([n % 2])) for n in range(5, 16)]
    batch = Batch.from_data_list(graphs)

    class GraphClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = GCNConv(4, 8), nn.Linear(8, 2)

        def forward(self, b):
            return self.head(global_mean_pool(F.relu(self.conv(b.x, b.edge_index)), b.batch))

    _same_step_when_split(GraphClassifier(), batch, lambda m, b: F.cross_entropy(m(b), b.y), limit=6)


def test_a_batch_of_unknown_kind_says_how_to_make_it_split():
    with pytest.raises(TypeError, match="memory_split"):
        kk.batches.split_batch(object(), 2)


# ---- where the memory runs out: the optimizer's first step, validation -----------------------

class _AdamWOutOfMemoryAtFirst(torch.optim.AdamW):
    """AdamW whose first step runs out of memory while it allocates its moments (one parameter's
    state half made), as a card with room for the model and its gradients but not yet for the
    moments, beside the batch's cached activations, would."""

    def step(self, closure=None):
        if not getattr(self, "failed_once", False):
            self.failed_once = True
            first = self.param_groups[0]["params"][0]
            self.state[first]["step"] = torch.tensor(0.0)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated in AdamW's first step)")
        return super().step(closure)


def _adamw_fit(optimizer_class, steps: int = 3):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    data = kk.datasets.tabular(48, features=6, seed=0)
    result = kk.fit(model, optimizer_class(model.parameters(), lr=0.05), kk.make_loader(data, 16, num_workers=0),
                    kk.supervised(F.cross_entropy), run=kk.Alone(device="cpu"), epochs=1, max_steps=steps,
                    progress=False)
    return model.state_dict(), result.oom_events, result.precision


@pytest.mark.parametrize("machine", ["", "t4x2"])  # fp32 here; fp16 and its scaler on an emulated T4
def test_out_of_memory_in_the_optimizer_s_first_step_is_backed_off_to_the_same_weights(machine, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_EMULATE", machine)
    whole, _, precision = _adamw_fit(torch.optim.AdamW)
    backed_off, events, _ = _adamw_fit(_AdamWOutOfMemoryAtFirst)
    assert precision == ("fp16" if machine else "fp32")
    assert events == [{"step": 0, "per_gpu_batch": 8, "in": "optimizer"}]
    close = {"rtol": 5e-2, "atol": 1e-3} if machine else {"rtol": 1e-5, "atol": 1e-6}  # 16-bit chunks
    for key in whole:
        torch.testing.assert_close(backed_off[key], whole[key], **close)


class _AdamWOutOfMemoryLater(torch.optim.AdamW):
    """Out of memory inside an update whose moments exist: some weights may be updated already."""

    def step(self, closure=None):
        if self.state and float(next(iter(self.state.values()))["step"]) >= 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated mid-update)")
        return super().step(closure)


def test_out_of_memory_inside_a_later_update_says_the_step_cannot_be_taken_again(monkeypatch):
    with pytest.raises(kk.step.OutOfMemoryFloor, match="inside the optimizer's update at step 1.*"
                                                       "cannot be taken again"):
        _adamw_fit(_AdamWOutOfMemoryLater)


def test_the_failed_step_is_out_of_scope_when_its_memory_is_freed(monkeypatch):
    """Freed inside the ``except`` block, the traceback still held the failed step's frames and
    the activations they reference: nothing was freed."""
    import sys
    handling = []
    free = kk.step.free_after_oom
    monkeypatch.setattr(kk.step, "free_after_oom", lambda opt: (handling.append(sys.exc_info()[0]), free(opt)))
    torch.manual_seed(0)
    batch = (torch.randn(13, 24, 3), torch.randn(13, 5))
    _one_step(Forecaster(), batch, _oom_above(7, kk.supervised(F.mse_loss)))
    assert handling == [None]


class _EvalOutOfMemoryAbove(nn.Module):
    """Runs out of memory for evaluation batches larger than ``limit`` (training is untouched)."""

    def __init__(self, inner, limit):
        super().__init__()
        self.inner, self.limit = inner, limit

    def forward(self, x):
        if not self.training and x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated in validation)")
        return self.inner(x)


@pytest.mark.parametrize("through", ["evaluator", "val_loader"])
def test_validation_out_of_memory_is_answered_by_halving_the_batch(through):
    def validated(limit):
        torch.manual_seed(0)
        model = _EvalOutOfMemoryAbove(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4)), limit)
        data = kk.datasets.tabular(60, features=6, seed=0)
        val = kk.make_loader(kk.datasets.tabular(27, features=6, seed=1), 27, train=False, num_workers=0)
        how = {"evaluate": kk.evaluate.classification(val, torch.device("cpu"))} \
            if through == "evaluator" else {"val_loader": val}
        result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), kk.make_loader(data, 20, num_workers=0),
                        kk.supervised(F.cross_entropy), run=kk.Alone(device="cpu"), epochs=1, progress=False, **how,
                        speed=kk.Speed(precision="fp32"))
        return result.history[-1]
    whole, halved = validated(limit=100), validated(limit=5)  # 27 -> 13 + 14 -> ... -> <= 5
    assert halved == pytest.approx({**whole, "seconds": halved["seconds"],
                                    "samples_per_s": halved["samples_per_s"]})
