import clock as virtual_clock
import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import accel, datasets, loaders as data, models
from kagglekit.loop.durable import FIRST_SAVE_FLOOR_S
from kagglekit.state.checkpoint import CheckpointManager

LOSS = kk.supervised(F.cross_entropy)


def _setup(seed=0, n=512, dropout=0.0):
    kk.seed_everything(seed)
    ds = datasets.tabular(n, features=16, seed=seed)
    model = models.MLP(16, 32, 4, dropout=dropout)
    return ds, model


def test_training_learns_the_builtin_task():
    ds, model = _setup()
    train, val = datasets.split(ds)
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    result = kk.fit(model, opt, data.make_loader(train, 32, num_workers=0), LOSS, epochs=6,
                    val_loader=data.make_loader(val, 128, train=False, num_workers=0),
                    progress=False)
    losses = [h["val_loss"] for h in result.history]
    assert result.stopped == "completed" and result.steps == 6 * (len(train) // 32)
    assert losses[-1] < 0.8 * losses[0]


def test_accumulation_equals_one_big_batch():
    ds, model_a = _setup()
    model_b = models.MLP(16, 32, 4)
    model_b.load_state_dict(model_a.state_dict())
    runs = []
    for model, batch, accumulate in [(model_a, 32, 1), (model_b, 8, 4)]:
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        kk.fit(model, opt, data.make_loader(ds, batch, num_workers=0), LOSS, epochs=2,
               accumulate=accumulate, progress=False)
        runs.append(model)
    for a, b in zip(runs[0].parameters(), runs[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_accumulation_changes_nothing_but_the_step_count():
    ds, model = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    result = kk.fit(model, opt, data.make_loader(ds, 8, num_workers=0), LOSS, epochs=1,
                    accumulate=3, progress=False)
    assert result.steps == 22  # 64 batches in groups of 3: 21 full steps and one of 1


def _failing_backend(gm, example_inputs):
    raise RuntimeError("backend exploded on purpose")


def test_compile_failure_falls_back_to_eager_with_the_reason(capsys):
    ds, model = _setup()
    reference = models.MLP(16, 32, 4)
    reference.load_state_dict(model.state_dict())
    for m, mode in [(model, {"backend": _failing_backend}), (reference, "off")]:
        kk.seed_everything(1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        result = kk.fit(m, opt, data.make_loader(ds, 32, num_workers=0), LOSS, epochs=1, progress=False,
                        speed=kk.Speed(compile=mode))
        if mode != "off":
            assert result.compile.startswith("eager (compile failed")
            assert "backend exploded on purpose" in capsys.readouterr().err
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)  # the failed attempt left no trace in the weights


@pytest.mark.slow
def test_a_compiled_fit_trains_compiled_as_the_eager_one_does():
    """torch.compile's own path, once (inductor on the CPU: about 15 s): the fit says "compiled",
    keeps it (no fallback), and ends where eager training ends, to float rounding."""
    ds, model = _setup()
    reference = models.MLP(16, 32, 4)
    reference.load_state_dict(model.state_dict())
    results = []
    for m, mode in [(model, "strict"), (reference, "off")]:
        kk.seed_everything(1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        results.append(kk.fit(m, opt, data.make_loader(ds, 32, num_workers=0), LOSS, epochs=2, progress=False,
                              speed=kk.Speed(compile=mode), monitor=False))
    assert [r.compile for r in results] == ["compiled", "eager"]
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_strict_compile_raises_instead_of_falling_back():
    _, model = _setup()
    compiled = accel.Compiled(model, "strict", {"backend": _failing_backend})
    with pytest.raises(Exception, match="backend exploded"):
        compiled.run(lambda m: m(torch.randn(2, 16)))


def _fit_until(budget, ckpt: CheckpointManager, clock):
    """A fit of 30 ms steps (on ``clock``) and many epochs, stopped by ``budget``:
    (data, model, optimizer, result)."""
    ds, model = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def slow_loss(m, batch):
        clock.sleep(0.03)
        return LOSS(m, batch)
    result = kk.fit(model, opt, data.make_loader(ds, 8, num_workers=0), slow_loss, run=kk.Alone(time_budget=budget),
                    epochs=50, checkpoints=ckpt, progress=False)
    return ds, model, opt, result


def test_time_budget_stops_with_a_checkpoint_before_the_deadline(tmp_path, monkeypatch):
    """On the virtual clock (tests/clock.py): steps of exactly 30 ms, saves that take no time.
    The stop keeps room for two steps and twice the first save's floor, and no more."""
    clock = virtual_clock.install(monkeypatch)
    ckpt = CheckpointManager(tmp_path, search=[])
    budget = kk.Budget(1.5)
    ds, model, opt, result = _fit_until(budget, ckpt, clock)
    assert result.stopped == "time_budget" and 0 < budget.remaining() < 2 * FIRST_SAVE_FLOOR_S + 0.1
    found, state = ckpt.load_latest()
    assert found.step == result.steps and not found.meta["final"]
    # The next session carries on from there and finishes.
    again = kk.fit(model, opt, data.make_loader(ds, 8, num_workers=0), LOSS, epochs=2,
                   checkpoints=ckpt, progress=False)
    assert again.resumed_from == found.path.as_posix() and again.stopped == "completed"


def test_a_slow_first_save_still_ends_before_the_deadline(tmp_path, monkeypatch):
    """The save a stop ends with is the run's first (no timed save before it): its time unknown,
    the stop must leave room for it anyway. A disk that takes 0.4 s per save, 2.5 s of budget:
    without an estimate of the first save the loop ran until 0.06 s were left and overran."""
    clock = virtual_clock.install(monkeypatch)
    save = CheckpointManager.save

    def slow_save(self, *args, **kwargs):
        clock.sleep(0.4)
        return save(self, *args, **kwargs)
    monkeypatch.setattr(CheckpointManager, "save", slow_save)
    budget = kk.Budget(2.5)
    *_, result = _fit_until(budget, CheckpointManager(tmp_path, search=[]), clock)
    assert result.stopped == "time_budget" and budget.remaining() > 0 and result.steps > 5


def test_finished_training_is_not_repeated(tmp_path):
    ds, model = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = CheckpointManager(tmp_path, search=[])
    kk.fit(model, opt, data.make_loader(ds, 64, num_workers=0), LOSS, epochs=1,
           checkpoints=ckpt, progress=False)
    again = kk.fit(model, opt, data.make_loader(ds, 64, num_workers=0), LOSS, epochs=1,
                   checkpoints=ckpt, progress=False)
    assert again.stopped == "already_complete" and again.steps_this_session == 0


def test_early_stopping_and_hooks_and_max_steps():
    ds, model = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # never improves
    seen = []
    result = kk.fit(model, opt, data.make_loader(ds, 64, num_workers=0), LOSS, epochs=20,
                    val_loader=data.make_loader(ds, 256, train=False, num_workers=0),
                    early_stopping=kk.EarlyStopping(patience=2), progress=False,
                    on_epoch_end=lambda s: seen.append(s.epoch))
    assert result.stopped == "early_stopping" and result.epochs == 3 and seen == [0, 1, 2]
    limited = kk.fit(model, opt, data.make_loader(ds, 8, num_workers=0), LOSS, epochs=5,
                     max_steps=7, progress=False)
    assert limited.stopped == "max_steps" and limited.steps == 7


def test_warmup_then_cosine_restarts_with_torch_schedulers():
    ds, model = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=4)
    cosine = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=8)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warmup, cosine], milestones=[4])
    lrs = []
    kk.fit(model, opt, data.make_loader(ds, 32, num_workers=0), LOSS, epochs=2, scheduler=sched,
           progress=False, on_step_end=lambda s: lrs.append(opt.param_groups[0]["lr"]))
    assert lrs[0] < lrs[2] < lrs[3] == pytest.approx(0.1)  # warm-up
    assert lrs[3 + 8] == pytest.approx(0.1)  # warm restart after T_0 steps


def test_gradient_checkpointing_gives_the_same_gradients():
    _, model = _setup()
    twin = models.MLP(16, 32, 4)
    twin.load_state_dict(model.state_dict())
    accel.checkpoint_blocks([twin.body])
    x = torch.randn(8, 16)
    for m in (model, twin):
        m(x).pow(2).sum().backward()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


def test_a_checkpoint_of_another_config_is_not_resumed(tmp_path):
    ds, model = _setup()
    ckpt = CheckpointManager(tmp_path, search=[])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kk.fit(model, opt, data.make_loader(ds, 64, num_workers=0), LOSS, run=kk.Alone(config={"lr": 0.1, "epochs": 1}),
           epochs=1, checkpoints=ckpt, progress=False)
    longer = kk.fit(model, opt, data.make_loader(ds, 64, num_workers=0), LOSS,
                    run=kk.Alone(config={"lr": 0.1, "epochs": 2}), epochs=2, checkpoints=ckpt, progress=False)
    # More epochs of the same run: resumed, and the second epoch trained.
    assert longer.resumed_from is not None and longer.stopped == "completed"
    assert longer.steps_this_session == len(ds) // 64 and longer.epochs == 2
    with pytest.warns(UserWarning, match=r"different config \(lr: 0.1 -> 0.2\)"):
        other = kk.fit(model, opt, data.make_loader(ds, 64, num_workers=0), LOSS,
                       run=kk.Alone(config={"lr": 0.2, "epochs": 1}), epochs=1, checkpoints=ckpt, progress=False)
    assert other.resumed_from is None and other.steps == len(ds) // 64


def test_a_resumed_runs_progress_line_rates_only_this_sessions_steps(capsys, monkeypatch):
    from kagglekit import progress
    monkeypatch.setattr(progress, "watched", lambda: False)  # a batch run: lines, not a widget
    skipped = progress.bar(16, "train", initial=16)  # a finished run found on disk
    skipped.close()
    assert capsys.readouterr().out.strip() == "train: 16/16 steps"
    resumed = progress.bar(40, "train", initial=30)
    resumed.started -= 2.0  # two seconds for the ten steps of this session
    resumed.update(10)
    resumed.close()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("train: 40/40 steps, ") and 4.0 < float(line.split(", ")[1].split()[0]) <= 5.0


@pytest.mark.parametrize("accumulate", [1, 3])
def test_a_schedule_in_optimizer_steps_holds_with_accumulation(accumulate):
    """kk.loaders.schedule counts optimizer steps: with 3 batches per step, 12 steps read 36
    batches and validate every 2 steps, as without accumulation."""
    torch.manual_seed(0)
    ds = datasets.tabular(64 * 8, features=8, classes=2)
    loader = data.make_loader(ds, 8, seed=0)  # 64 batches a pass
    model = models.MLP(8, 16, 2)
    seen = []
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.01), loader,
                    kk.supervised(F.cross_entropy), progress=False,
                    on_epoch_end=lambda state: seen.append(state.step),
                    **data.schedule(12, loader, 2, accumulate))
    assert result.steps == 12 and seen == list(range(2, 13, 2))


def test_a_run_shorter_than_its_evaluation_interval_still_evaluates_at_its_end():
    torch.manual_seed(0)
    loader = data.make_loader(datasets.tabular(512, features=8, classes=2), 8, seed=0)
    model = models.MLP(8, 16, 2)
    seen = []
    kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.01), loader, kk.supervised(F.cross_entropy),
           progress=False, on_epoch_end=lambda state: seen.append(state.step), **data.schedule(5, loader, 100))
    assert seen == [5]


class _Crash(Exception):
    """A session that dies between two steps."""


def test_the_epoch_loss_is_the_mean_of_its_step_losses_across_a_resume_between_two_sums(tmp_path):
    """Step losses are summed when read (the NaN check every 16 steps): an epoch of 50 steps ends
    between two sums, and a checkpoint at step 21 holds the five steps not yet summed."""
    seen = []

    def recorded(m, batch):
        loss = LOSS(m, batch)
        seen.append(float(loss.detach()))
        return loss

    def run(model, ckpt, **hooks):
        return kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                      data.make_loader(ds, 8, num_workers=0, seed=0), recorded, epochs=2,
                      checkpoints=ckpt, progress=False, **hooks)

    ds, model = _setup(n=400)  # 50 steps of 8 an epoch
    whole = run(model, CheckpointManager(tmp_path / "whole", search=[]))
    means = [sum(seen[:50]) / 50, sum(seen[50:]) / 50]
    assert [h["train_loss"] for h in whole.history] == pytest.approx(means, rel=1e-6)

    def crash_after_saving_step_21(state):
        if state.step == 21:
            state.request_checkpoint()
        if state.step == 22:
            raise _Crash

    _, model = _setup(n=400)
    seen.clear()
    ckpt = CheckpointManager(tmp_path / "crashed", search=[])
    with pytest.raises(_Crash):
        run(model, ckpt, on_step_end=crash_after_saving_step_21)
    before = seen[:21]  # the loss of step 22 died with the session
    seen.clear()
    resumed = run(model, ckpt)
    assert resumed.steps_this_session == 100 - 21
    steps = before + seen
    assert [h["train_loss"] for h in resumed.history] == pytest.approx(
        [sum(steps[:50]) / 50, sum(steps[50:]) / 50], rel=1e-6)
    assert [h["train_loss"] for h in resumed.history] == pytest.approx(means, rel=1e-6)


@pytest.mark.parametrize("kind", ["tuple", "dict", "graphs"])
def test_the_validation_loss_is_the_mean_over_samples_not_over_batches(kind):
    """Batches of 5 and 1 samples: the loss is the mean of the six samples' losses, whatever
    the batch kind (it was a mean of batch means for dict batches, every token batch)."""
    from torch_geometric.data import Batch, Data

    from kagglekit.loop.validation import evaluate_loss
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(6, 3), torch.randn(6, 1)
    per_sample = F.mse_loss(model(x), y, reduction="none").flatten()
    if kind == "graphs":  # one node per graph: a graph's sample is its node
        graphs = [Data(x=x[i:i + 1], y=y[i:i + 1], edge_index=torch.zeros(2, 0, dtype=torch.long)) for i in range(6)]
        batches = [Batch.from_data_list(graphs[:5]), Batch.from_data_list(graphs[5:])]
        loss_fn = lambda m, b: F.mse_loss(m(b.x), b.y)  # noqa: E731
    else:
        parts = [(x[:5], y[:5]), (x[5:], y[5:])]
        batches = parts if kind == "tuple" else [{"x": a, "y": b} for a, b in parts]
        loss_fn = kk.supervised(F.mse_loss) if kind == "tuple" else (lambda m, b: F.mse_loss(m(b["x"]), b["y"]))
    with torch.no_grad():
        loss = evaluate_loss(model, batches, loss_fn, torch.device("cpu"))["val_loss"]
    assert loss == pytest.approx(per_sample.mean().item(), rel=1e-6)
    assert loss != pytest.approx((per_sample[:5].mean() + per_sample[5]).item() / 2, rel=1e-3)


@pytest.mark.parametrize("warmup", [True, False])
def test_the_weights_average_is_the_exponential_average_of_each_steps_weights(warmup):
    """kk.Ema against a plain reference: after every optimizer step, avg = d * avg + (1 - d) * w
    (the first step's weights to start), buffers averaged too; fit's own weights untouched. With its
    warm-up (timm's, TensorFlow's), update n keeps d = min(decay, (1 + n) / (10 + n)): the first,
    untrained steps fade fast."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 5), torch.randn(64, 1)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    seen = []
    ema = kk.Ema(0.8, validate=False, warmup=warmup)
    loader = kk.make_loader(torch.utils.data.TensorDataset(x, y), 16, seed=0, num_workers=0)
    kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, kk.supervised(torch.nn.functional.mse_loss),
           run=kk.Alone(device="cpu", precision="fp32", resume=False), epochs=2, progress=False, monitor=False,
           on_step_end=lambda st: seen.append({k: v.clone() for k, v in model.state_dict().items()}), ema=ema)
    expected = dict(seen[0])
    for n, weights in enumerate(seen[1:], start=1):
        d = min(0.8, (1 + n) / (10 + n)) if warmup else 0.8
        for k, v in weights.items():
            if v.is_floating_point():
                expected[k] = d * expected[k] + (1 - d) * v
    got = ema.model.state_dict()
    for k, v in expected.items():
        if v.is_floating_point():
            assert torch.allclose(got[k], v, atol=1e-6), k
    assert not torch.equal(got["0.weight"], model.state_dict()["0.weight"])
    with pytest.raises(ValueError, match="between 0 and 1"):
        kk.Ema(1.0)


def test_resetting_the_peak_before_the_first_cuda_allocation_asks_nothing_of_the_allocator(monkeypatch):
    """torch.cuda.reset_peak_memory_stats before a process's first CUDA allocation raises "Invalid
    device argument" (the sequence notebook's first model on a lent H200): there is no peak to reset
    yet, so the kit does not ask; once CUDA has started, it does."""
    from kagglekit.loop import memory
    asked = []

    def reset(device):
        if not torch.cuda.is_initialized():
            raise RuntimeError("Invalid device argument ")
        asked.append(device)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    memory.reset_peak("cuda:0")
    memory.reset_peak("cpu")
    assert asked == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    memory.reset_peak("cuda:0")
    assert asked == ["cuda:0"]
