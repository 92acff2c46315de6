"""A run does what its parameters say: its length is run control, never identity.

A finished run asked for more epochs resumes and trains on to them (bit for bit an
uninterrupted run of the new length where the schedule does not depend on the length);
asked for fewer, it keeps the longer run's weights and says so."""
import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, loaders as data, models
from kagglekit.loop.schedule import ScheduleError
from kagglekit.state.checkpoint import CheckpointManager

LOSS = kk.supervised(F.cross_entropy)
BATCH = 32


def _fit(folder, epochs, schedule="step", **options):
    """One session: a fresh model, optimizer and scheduler built for ``epochs``, as a
    notebook builds them, then fit with the checkpoints in ``folder``."""
    kk.seed_everything(0)
    ds = datasets.tabular(256, features=16, seed=0)
    model = models.MLP(16, 32, 4, dropout=0.2)  # dropout: the RNG state must carry over too
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    loader = data.make_loader(ds, BATCH, seed=0, num_workers=0)
    sched = {"step": lambda: torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7),
             "onecycle": lambda: torch.optim.lr_scheduler.OneCycleLR(
                 opt, max_lr=3e-3, epochs=epochs, steps_per_epoch=len(loader))}[schedule]()
    result = kk.fit(model, opt, loader, LOSS, epochs=epochs, scheduler=sched, progress=False,
                    checkpoints=CheckpointManager(folder, search=[], config={"lr": 3e-3, "epochs": epochs}),
                    **options)
    return result, model, opt


def test_more_epochs_train_on_and_equal_an_uninterrupted_run(tmp_path, capsys):
    per_epoch = 256 // BATCH
    steps = []
    for epochs in (1, 2, 4):
        result, chained, _ = _fit(tmp_path / "chain", epochs)
        steps.append((result.steps_this_session, result.steps, result.stopped))
    assert steps == [(per_epoch, per_epoch, "completed"), (per_epoch, 2 * per_epoch, "completed"),
                     (2 * per_epoch, 4 * per_epoch, "completed")]
    assert "training on to 32 steps (4 epochs)" in capsys.readouterr().out
    _, straight, _ = _fit(tmp_path / "straight", 4)
    for a, b in zip(chained.state_dict().values(), straight.state_dict().values()):
        assert torch.equal(a, b)  # StepLR does not depend on the length: bit for bit


def test_a_schedule_that_depends_on_the_length_follows_the_new_one_and_says_so(tmp_path):
    _fit(tmp_path / "chain", 1, "onecycle")
    result, _, opt = _fit(tmp_path / "chain", 2, "onecycle")
    assert result.steps_this_session == 8 and result.steps == 16 and result.stopped == "completed"
    assert "OneCycleLR depends on the run's length" in result.extended
    _, _, straight = _fit(tmp_path / "straight", 2, "onecycle")
    # The extension ends where the new schedule ends (its final, smallest rate).
    assert opt.param_groups[0]["lr"] == pytest.approx(straight.param_groups[0]["lr"])


def test_fewer_epochs_keep_the_longer_runs_weights_and_say_so(tmp_path, capsys):
    _, longer, _ = _fit(tmp_path, 3)
    result, shorter, _ = _fit(tmp_path, 1)
    assert result.stopped == "already_complete" and result.steps_this_session == 0
    assert result.steps == 3 * 256 // BATCH
    assert "asks for fewer: keeping the longer run's weights" in capsys.readouterr().out
    for a, b in zip(longer.state_dict().values(), shorter.state_dict().values()):
        assert torch.equal(a, b)


def test_a_run_that_stopped_early_is_not_trained_on(tmp_path):
    stopper = kk.EarlyStopping(monitor="val_loss", patience=1, min_delta=10.0)  # never improves
    first, _, _ = _fit(tmp_path, 6, early_stopping=stopper,
                       val_loader=data.make_loader(datasets.tabular(64, features=16), 64,
                                                   train=False, num_workers=0))
    assert first.stopped == "early_stopping" and first.epochs == 2
    again, _, _ = _fit(tmp_path, 12, early_stopping=kk.EarlyStopping(patience=1, min_delta=10.0),
                       val_loader=data.make_loader(datasets.tabular(64, features=16), 64,
                                                   train=False, num_workers=0))
    assert again.stopped == "already_complete" and again.steps_this_session == 0


def test_a_onecycle_built_for_fewer_steps_is_refused_before_any_training(tmp_path):
    kk.seed_everything(0)
    model = models.MLP(16, 32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = data.make_loader(datasets.tabular(256, features=16), BATCH, num_workers=0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(ScheduleError, match=r"built for 10 steps but the fit runs 16.*epochs=2"):
        kk.fit(model, opt, loader, LOSS, epochs=2, scheduler=sched, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
