"""precision="auto" measured: the fit's own step timed in fp32 and in the card's mixed precision,
the faster one trained in, bitwise as if it had been named; a resume does not measure again.
The timing is a stand-in (the CPU's rates say nothing of a card's); the steps are real."""
import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit.loop import probe

X = torch.randn(256, 16, generator=torch.Generator().manual_seed(0))
Y = (X[:, :3].sum(1) > 0).long()


def _fit(precision: str, epochs: int = 2, checkpoints=None, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                torch.nn.Linear(32, 2))
    loader = kk.make_loader(torch.utils.data.TensorDataset(X, Y), 16, seed=0, num_workers=0)
    result = kk.fit(model, torch.optim.AdamW(model.parameters(), lr=1e-2), loader, kk.supervised(F.cross_entropy),
                    run=kk.Alone(device="cpu", precision=precision), epochs=epochs, progress=False,
                    checkpoints=checkpoints, monitor=False, **options)
    return {k: v.clone() for k, v in model.state_dict().items()}, result


@pytest.fixture
def card(monkeypatch):
    """The T4's road on the CPU (auto: fp16 + GradScaler), measured as a real card would be."""
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    monkeypatch.setattr(probe, "MIN_STEPS", 1)
    monkeypatch.setattr(probe, "_emulated", lambda: False)
    measured = []

    def rates(faster: str):
        def stand_in(run_steps, samples, name, device):
            run_steps()  # the steps themselves run: the probe must leave no trace of them
            measured.append(name)
            return 300.0 if name == faster else 200.0
        monkeypatch.setattr(probe, "measure", stand_in)
        return measured
    return rates


@pytest.mark.parametrize("faster", ["fp32", "fp16"])
def test_auto_trains_in_the_faster_precision_bitwise_as_if_named(card, faster):
    measured = card(faster)
    auto, result = _fit("auto")
    assert measured == ["fp16", "fp32"] and result.precision == faster
    chosen = result.summary()["precision_probe"]
    assert chosen["chosen"] == faster and chosen["rates"] == {"fp16": 300.0 if faster == "fp16" else 200.0,
                                                             "fp32": 300.0 if faster == "fp32" else 200.0}
    assert ("not 10% faster" in chosen["why"]) == (faster == "fp32")
    named, plain = _fit(faster)
    assert plain.summary()["precision_probe"] == {}  # named: obeyed, never measured
    assert all(torch.equal(auto[k], named[k]) for k in auto)  # the probe left no trace


def test_a_margin_too_small_keeps_fp32(card, monkeypatch):
    card("fp16")
    monkeypatch.setattr(probe, "measure", lambda run_steps, samples, name, device: 105.0 if name == "fp16" else 100.0)
    assert _fit("auto")[1].precision == "fp32"  # x1.05: not worth fp16's range


def test_a_resume_trains_on_in_the_measured_precision_without_measuring(card, tmp_path):
    measured = card("fp32")
    whole, _ = _fit("auto", epochs=3, checkpoints=kk.CheckpointManager(tmp_path / "whole"))
    assert measured == ["fp16", "fp32"]
    _fit("auto", epochs=1, checkpoints=kk.CheckpointManager(tmp_path / "cut"))  # the first session
    measured.clear()
    resumed, result = _fit("auto", epochs=3, checkpoints=kk.CheckpointManager(tmp_path / "cut"))
    assert measured == [] and result.precision == "fp32" and result.resumed_from
    assert result.summary()["precision_probe"]["chosen"] == "fp32"
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_a_short_fit_or_the_emulation_keeps_the_cards_precision_and_says_why(monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    _, short = _fit("auto", epochs=1)  # 16 steps
    why = short.summary()["precision_probe"]["why"]
    assert short.precision == "fp16" and "fewer than the 100 worth measuring" in why
    monkeypatch.setattr(probe, "MIN_STEPS", 1)
    _, emulated = _fit("auto", epochs=1)
    record = emulated.summary()["precision_probe"]
    assert emulated.precision == "fp16" and record["why"].startswith("emulated T4")
    assert set(record["rates"]) == {"fp16", "fp32"} and all(r > 0 for r in record["rates"].values())


def _scaled_fit(loss_fn, steps: int = 40):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    loader = kk.make_loader(torch.utils.data.TensorDataset(X, Y), 16, seed=0, num_workers=0)
    return kk.fit(model, torch.optim.SGD(model.parameters(), lr=1e-2), loader, loss_fn,
                  run=kk.Alone(device="cpu", precision="fp16"), epochs=steps // len(loader), progress=False,
                  monitor=False)


def _overflowing(model, batch):
    """A finite loss whose gradients are NaN at every step (sqrt's slope at 0): fp16's scaler
    skips each step and halves its scale, as a model whose gradients fp16 cannot hold makes it."""
    x, y = batch
    out = model(x)
    return F.cross_entropy(out, y) + torch.sqrt(out.abs() * 0).sum()


def test_the_scalers_scale_and_skipped_steps_are_recorded_and_a_collapse_is_flagged(monkeypatch, tmp_path):
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")  # fp16 with its GradScaler, on the CPU
    healthy = _scaled_fit(kk.supervised(F.cross_entropy)).summary()
    assert [set(h) >= {"scale", "skipped_steps"} for h in healthy["history"]] == [True, True]
    assert healthy["scaler"]["healthy"] and healthy["scaler"]["skipped_steps"] == 0
    assert healthy["scaler"]["scale"] == 65536.0  # nothing overflowed in 32 steps: no growth yet either
    sick = _scaled_fit(_overflowing).summary()
    assert sick["scaler"]["skipped_steps"] == sick["steps"] == 32 and not sick["scaler"]["healthy"]
    assert sick["scaler"]["lowest_scale"] < 1 and "32 of 32 steps skipped (100%" in sick["scaler"]["why"]
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path))
    run = kk.start({"seed": 0}, "scaler", declared={"seed": 0}, verbose=False)
    run.log_fit("fit", sick)
    import json
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["fit"]["scaler"]["skipped_steps"] == 32 and saved["fit"]["history"][0]["skipped_steps"] == 16
    assert saved["notes"][0].startswith("fit: fp16's scaler was unhealthy: its scale fell to ")
    from kagglekit.tools.publish.comparison import _scaler
    judged = _scaler(saved)
    assert judged["verdict"] == "investigate" and "fit: its scale fell" in judged["reason"]
    assert _scaler({"fit": {"scaler": healthy["scaler"]}})["verdict"] == "success"


def test_a_loader_shorter_than_the_probe_is_read_again_from_its_first_batch(card):
    card("fp32")
    model = torch.nn.Linear(16, 2)
    batch = (X[:16], Y[:16])
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), [batch], kk.supervised(F.cross_entropy),
                    run=kk.Alone(device="cpu", precision="auto"), epochs=3, progress=False, monitor=False)
    assert result.precision == "fp32" and result.summary()["precision_probe"]["chosen"] == "fp32"
