"""fit(cuda_graphs=...): capture, replay, fallback with the reason.

CUDA graphs exist only on a GPU. On CPU the guard logic runs against a stand-in for
torch.cuda.make_graphed_callables that keeps the memory semantics that make graphs
hazardous: one set of activations, outputs and gradient buffers per graph, which
every replay overwrites. The ``gpu`` tests run the real capture where CUDA is.
"""
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import cudagraph, datasets, loaders as data, models

LOSS = kk.supervised(F.cross_entropy)


def standin_make_graphed_callables(module, sample_args, num_warmup_iters=3, **_):
    """make_graphed_callables on CPU: same warm-up, same static buffers, no graph."""
    params = tuple(module.parameters())
    eager = module.forward
    for _ in range(num_warmup_iters):  # as torch: forward and autograd.grad, .grad untouched
        out = eager(*sample_args)
        torch.autograd.grad(out, params, torch.ones_like(out))
    static = {}

    class Replay(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            with torch.enable_grad():  # the graph's one set of activations
                static["live"] = eager(*inputs[:len(sample_args)])
            static.setdefault("out", torch.empty_like(static["live"])).copy_(static["live"])
            return static["out"].detach()

        @staticmethod
        def backward(ctx, grad):
            grads = torch.autograd.grad(static["live"], params, grad)
            bufs = static.setdefault("grads", [torch.empty_like(g) for g in grads])
            for buf, g in zip(bufs, grads):
                buf.copy_(g)
            return (None,) * len(sample_args) + tuple(b.detach() for b in bufs)

    training = module.training

    def new_forward(*args, **kwargs):
        if module.training == training:
            return Replay.apply(*args, *params)
        return eager(*args, **kwargs)
    module.forward = new_forward
    return module


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setattr(cudagraph, "make_graphed_callables", standin_make_graphed_callables)
    monkeypatch.setattr(cudagraph, "REQUIRE_CUDA", False)


class BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


def _train(cuda_graphs, model_cls=BatchNormNet, n=200, batch=32, accumulate=1, loss=LOSS,
           **kw):
    kk.seed_everything(0)
    ds = datasets.tabular(n, features=16, seed=0)
    model = model_cls()
    opt = torch.optim.AdamW(model.parameters(), 1e-2)
    result = kk.fit(model, opt, data.make_loader(ds, batch, num_workers=0, seed=0, drop_last=False), loss,
                    run=kk.Alone(device="cpu"), epochs=2, accumulate=accumulate, progress=False, **kw,
                    speed=kk.Speed(cuda_graphs=cuda_graphs))
    return model, result


def _assert_same_model(a, b):
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=name)


def test_on_cpu_auto_trains_eagerly_and_says_why():
    eager, _ = _train("off")
    graphed, result = _train("auto")
    assert result.cuda_graphs == "eager (CUDA graphs need a CUDA device)"
    assert result.summary()["cuda_graphs"] == result.cuda_graphs
    for x, y in zip(eager.state_dict().values(), graphed.state_dict().values()):
        assert torch.equal(x, y)


def test_strict_refuses_before_any_training_and_names_the_fix():
    kk.seed_everything(0)
    model = models.MLP(16, 32, 4)
    before = [p.detach().clone() for p in model.parameters()]
    loader = data.make_loader(datasets.tabular(64, features=16), 16, num_workers=0)
    with pytest.raises(ValueError, match="cuda_graphs='auto'"):
        kk.fit(model, torch.optim.SGD(model.parameters(), 0.1), loader, LOSS, run=kk.Alone(device="cpu"),
               progress=False, speed=kk.Speed(cuda_graphs="strict"))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match="not both"):
        kk.fit(model, torch.optim.SGD(model.parameters(), 0.1), loader, LOSS, run=kk.Alone(device="cpu"),
               progress=False, speed=kk.Speed(compile="auto", cuda_graphs="auto"))


def test_replayed_training_equals_eager_with_accumulation_batchnorm_and_a_short_batch(standin):
    eager, _ = _train("off", accumulate=3)
    graphed, result = _train("auto", accumulate=3)
    # 200 samples in batches of 32: six full batches replay, the short last one runs eagerly
    assert result.cuda_graphs.startswith("cuda graph: 12 of 14 training forwards replayed")
    assert "2 x input shapes (8, 16) differ from the captured (32, 16)" in result.cuda_graphs
    _assert_same_model(eager, graphed)  # BatchNorm statistics too: warm-up left no trace
    assert "forward" not in graphed.__dict__  # fit put the eager forward back


def test_the_standin_reproduces_the_gradient_aliasing_hazard(standin):
    """Without begin_pass's copy, accumulation over two replays keeps a wrong gradient."""
    kk.seed_everything(0)
    model, x = models.MLP(16, 32, 4), torch.randn(2, 8, 16)
    expected = torch.autograd.grad(sum(model(xi).square().sum() for xi in x),
                                   model.head.weight)[0]
    guard = cudagraph.GraphedModel(model).install()
    for xi in x:
        guard._pass_calls = 0  # what begin_pass does, without copying the gradients out
        model(xi).square().sum().backward()
    assert guard.replays == 2
    assert not torch.allclose(model.head.weight.grad, expected, rtol=1e-3)
    model.zero_grad(set_to_none=True)
    for first, xi in zip((True, False), x):
        guard.begin_pass(first)
        model(xi).square().sum().backward()
    torch.testing.assert_close(model.head.weight.grad, expected)


def test_a_model_called_twice_per_pass_replays_once_and_stays_correct(standin):
    def two_views(model, batch):  # the contrastive pattern: two forwards, one backward
        x, y = batch
        return F.cross_entropy(model(x), y) + F.cross_entropy(model(x.flip(0)), y.flip(0))

    eager, _ = _train("off", loss=two_views)
    graphed, result = _train("auto", loss=two_views)
    assert "x the model is called more than once per backward pass" in result.cuda_graphs
    _assert_same_model(eager, graphed)


def test_evaluation_runs_eagerly_and_is_not_counted(standin):
    val = data.make_loader(datasets.tabular(50, features=16, seed=1), 25, train=False,
                           num_workers=0)
    _, result = _train("auto", n=128, val_loader=val)
    assert result.cuda_graphs == "cuda graph: 8 of 8 training forwards replayed"
    assert "val_loss" in result.history[-1]


def test_a_failed_capture_trains_eagerly_with_the_reason(monkeypatch, capsys):
    def refuses(module, sample_args, **_):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cudagraph, "make_graphed_callables", refuses)
    monkeypatch.setattr(cudagraph, "REQUIRE_CUDA", False)
    eager, _ = _train("off")
    graphed, result = _train("auto")
    assert "14 x capture failed: RuntimeError" in result.cuda_graphs
    assert "not permitted when stream is capturing" in capsys.readouterr().err
    _assert_same_model(eager, graphed)
    with pytest.raises(RuntimeError, match="stream is capturing"):
        _train("strict")


def test_a_forward_of_the_model_own_survives_fit(standin):
    model = models.MLP(16, 32, 4)
    own = model.forward
    model.forward = lambda x: own(x) * 2  # e.g. what checkpoint_blocks does to a block
    marker = model.forward
    loader = data.make_loader(datasets.tabular(64, features=16), 16, num_workers=0)
    kk.fit(model, torch.optim.SGD(model.parameters(), 0.1), loader, LOSS, run=kk.Alone(device="cpu"), progress=False,
           speed=kk.Speed(cuda_graphs="auto"))
    assert model.forward is marker


def _ddp_train(cuda_graphs, oom_backoff):
    # Each rank starts clean (forked from the kit's server, not from this process), so the
    # stand-in is put in place in the rank itself.
    cudagraph.make_graphed_callables, cudagraph.REQUIRE_CUDA = standin_make_graphed_callables, False
    kk.seed_everything(0)
    model = BatchNormNet()
    loader = data.make_loader(datasets.tabular(256, features=16, seed=0), 16, num_workers=0)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), 0.1), loader, LOSS, epochs=2, accumulate=2,
                    progress=False, speed=kk.Speed(cuda_graphs=cuda_graphs, oom_backoff=oom_backoff))
    return {k: v.clone() for k, v in model.state_dict().items()}, result.cuda_graphs


@pytest.mark.slow
@pytest.mark.parametrize("oom_backoff", [True, False], ids=["manual-sync", "ddp-hooks"])
def test_under_ddp_replayed_training_equals_eager(oom_backoff):
    """The guard sits on DDP's inner module; DDP's gradient sync sees the replayed grads."""
    eager, _ = kk.launch(_ddp_train, "off", oom_backoff, nprocs=2)
    graphed, status = kk.launch(_ddp_train, "auto", oom_backoff, nprocs=2)
    assert status == "cuda graph: 16 of 16 training forwards replayed"
    for name, value in eager.items():
        torch.testing.assert_close(graphed[name], value, rtol=1e-5, atol=1e-6, msg=name)


# ---- on a GPU: the real capture -------------------------------------------------

@pytest.mark.gpu
def test_real_capture_trains_like_eager_on_cuda():
    def train(mode):
        kk.seed_everything(0)
        model = BatchNormNet()
        loader = data.make_loader(datasets.tabular(200, features=16, seed=0), 32, num_workers=0,
                                  seed=0, drop_last=False)  # the short last batch, as on the CPU
        result = kk.fit(model, torch.optim.AdamW(model.parameters(), 1e-2), loader, LOSS,
                        run=kk.Alone(device="cuda"), epochs=2, accumulate=2, progress=False,
                        speed=kk.Speed(precision="fp32", cuda_graphs=mode))
        return model.cpu(), result

    eager, _ = train("off")
    graphed, result = train("strict")
    # six full batches replay per epoch, the short one (8 rows) runs eagerly
    assert result.cuda_graphs.startswith("cuda graph: 12 of 14")
    for x, y in zip(eager.state_dict().values(), graphed.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
def test_real_capture_under_fp16_autocast_and_grad_scaler():
    kk.seed_everything(0)
    model = models.MLP(16, 64, 4, depth=4)
    loader = data.make_loader(datasets.tabular(512, features=16, seed=0), 64, num_workers=0)
    result = kk.fit(model, torch.optim.AdamW(model.parameters(), 3e-3), loader, LOSS, run=kk.Alone(device="cuda"),
                    epochs=4, progress=False, speed=kk.Speed(precision="fp16", cuda_graphs="strict"))
    assert result.precision == "fp16" and result.cuda_graphs.startswith("cuda graph: 32 of 32")
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
