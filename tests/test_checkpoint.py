import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from kagglekit.state.checkpoint import CheckpointManager, CheckpointWarning, restore, snapshot

JOBS = Path(__file__).parent / "jobs"


def _state(value: float) -> dict:
    return {"model": {"w": torch.full((8,), value)}, "loop": {"step": int(value)}}


def test_save_then_load_latest_returns_the_newest_state(tmp_path):
    m = CheckpointManager(tmp_path, search=[])
    for step in (1, 2, 3):
        m.save(_state(step), step=step, metrics={"val_loss": 1.0 / step}, config={"lr": 0.1})
    found, state = m.load_latest()
    assert found.step == 3 and torch.equal(state["model"]["w"], torch.full((8,), 3.0))
    meta = json.loads(found.sidecar.read_text())
    assert meta["config"] == {"lr": 0.1} and len(meta["sha256"]) == 64
    assert meta["versions"]["torch"] == torch.__version__


def test_keeps_last_k_plus_the_best(tmp_path):
    m = CheckpointManager(tmp_path, keep_last=2, monitor="val_loss", search=[])
    for step, loss in [(1, 0.9), (2, 0.1), (3, 0.5), (4, 0.7), (5, 0.6)]:
        m.save(_state(step), step=step, metrics={"val_loss": loss})
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == [
        "step-00000002.pt", "step-00000004.pt", "step-00000005.pt"]
    assert m.best().step == 2


def test_corrupted_latest_falls_back_to_previous_and_names_both(tmp_path):
    m = CheckpointManager(tmp_path, keep_last=3, search=[])
    for step in (1, 2):
        m.save(_state(step), step=step)
    latest = tmp_path / "step-00000002.pt"
    blob = bytearray(latest.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # one flipped byte: still a zip, but wrong
    latest.write_bytes(bytes(blob))
    with pytest.warns(CheckpointWarning) as caught:
        found, state = m.load_latest()
    assert found.step == 1 and state["loop"]["step"] == 1
    text = next(str(w.message) for w in caught if w.category is CheckpointWarning)  # not another's
    assert "step-00000002.pt" in text and "step-00000001.pt" in text and "sha256" in text


def test_truncated_latest_falls_back(tmp_path):
    m = CheckpointManager(tmp_path, keep_last=3, search=[])
    for step in (1, 2):
        m.save(_state(step), step=step)
    latest = tmp_path / "step-00000002.pt"
    latest.write_bytes(latest.read_bytes()[:100])
    with pytest.warns(CheckpointWarning, match="falling back"):
        assert m.load_latest()[0].step == 1


def test_payload_without_sidecar_is_an_interrupted_save_and_ignored(tmp_path):
    m = CheckpointManager(tmp_path, search=[])
    m.save(_state(1), step=1)
    torch.save(_state(2), tmp_path / "step-00000002.pt")  # killed before its sidecar
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert m.load_latest()[0].step == 1


def test_loading_refuses_code_execution(tmp_path):
    m = CheckpointManager(tmp_path, search=[])

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    path = tmp_path / "step-00000001.pt"
    torch.save({"model": Evil()}, path)
    from kagglekit import atomic
    atomic.write_json(path.with_suffix(".json"),
                      {"step": 1, "sha256": atomic.sha256_file(path)})
    with pytest.warns(CheckpointWarning, match="Weights only load failed"):
        assert m.load_latest() is None


def test_latest_state_is_found_in_attached_inputs(tmp_path):
    previous = tmp_path / "input" / "notebooks" / "me" / "kernel" / "checkpoints" / "m"
    CheckpointManager(previous, search=[]).save(_state(5), step=5)
    m = CheckpointManager(tmp_path / "working" / "checkpoints" / "m", search=[previous])
    found, state = m.load_latest()
    assert found.path.parent == previous and state["loop"]["step"] == 5


def test_snapshot_restore_round_trip_includes_optimizer_and_rng():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    state = snapshot(model, opt)
    expected = torch.rand(3)
    model2 = torch.nn.Linear(4, 2)
    opt2 = torch.optim.Adam(model2.parameters())
    restore(state, model2, opt2)
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(model2.weight, model.weight)
    assert opt2.state_dict()["state"][0]["step"] == 1


def test_a_resume_on_a_gpu_loads_the_checkpoint_onto_the_cpu_first(tmp_path):
    """Loaded onto the fit's device, the saved RNG states landed on the GPU and every GPU resume
    crashed in torch.set_rng_state. The fit's device here stands in for the GPU ("meta": any
    device but the CPU); the state must come back on the CPU whatever it is."""
    from kagglekit.loop.durable import Durable
    from kagglekit.loop.fitstate import Parts
    from kagglekit.machine import precision
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    parts = Parts(model, opt, None, precision.Amp(precision.choose("fp32")), torch.device("meta"))
    manager = CheckpointManager(tmp_path, search=[])
    manager.save(snapshot(model, opt), step=1)
    keeper = Durable(parts, manager)
    found, state = keeper.resumer.agreed_latest()
    tensors = [state["model"]["weight"], state["rng"]["torch"], state["rng"]["numpy"]["keys"]]
    assert found.step == 1 and all(t.device.type == "cpu" for t in tensors)


def test_the_cuda_generator_is_restored_into_the_fit_s_own_card_only(monkeypatch):
    """A run saved on two GPUs (older checkpoints kept every card's state) resumes on one; a
    rank resumes from rank 0's save (its own card's state only)."""
    from kagglekit.state import rng
    set_on = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, card: set_on.append((int(state[0]), card)))
    state = rng.capture()
    state["cuda"] = [torch.tensor([10], dtype=torch.uint8), torch.tensor([11], dtype=torch.uint8)]
    rng.restore(state, torch.device("cuda:0"))  # on a one-GPU machine
    state["cuda"] = {0: torch.tensor([20], dtype=torch.uint8)}  # rank 0's save, read by rank 1
    rng.restore(state, torch.device("cuda:1"))
    rng.restore(state, torch.device("cpu"))  # a CPU fit sets no card
    assert set_on == [(10, 0), (20, 1)]


def _writing(folder: Path, before: set) -> list[Path]:
    """Temporary checkpoint files being written now (not leftovers of earlier kills)."""
    found = []
    for p in folder.glob(".step-*.pt.*.tmp"):
        try:
            if p.name not in before and p.stat().st_size > 0:
                found.append(p)
        except FileNotFoundError:  # renamed into place meanwhile
            pass
    return found


def _kill_mid_write(folder: Path, proc, before: set, timeout_s: float = 60.0) -> Path:
    """SIGKILL ``proc`` while a checkpoint is being written (after at least one finished)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        torn = _writing(folder, before)
        if torn and any(folder.glob("step-*.json")):
            proc.send_signal(signal.SIGKILL)
            return torn[0]
        if proc.poll() is not None:
            raise AssertionError(f"the save loop exited early (code {proc.returncode})")
        time.sleep(0.002)
    proc.kill()
    raise AssertionError(f"no write in progress seen within {timeout_s:.0f}s")


@pytest.mark.slow
def test_sigkill_during_a_write_leaves_the_previous_checkpoint_loadable(tmp_path):
    mid_write = 0
    for attempt in range(10):  # noqa: B007 (read after the loop)
        before = {p.name for p in tmp_path.glob(".*.tmp")}
        proc = subprocess.Popen([sys.executable, str(JOBS / "save_loop.py"), str(tmp_path)],
                                stdout=subprocess.DEVNULL)
        torn = _kill_mid_write(tmp_path, proc, before)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        mid_write += torn.exists()  # else the write finished just before the kill landed
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a torn file must never even be tried
            found, state = CheckpointManager(tmp_path, search=[]).load_latest()
        assert torch.equal(state["model"]["w"], torch.full((4_000_000,), float(found.step)))
        if mid_write == 3:
            break
    assert mid_write == 3, f"only {mid_write} of {attempt + 1} kills landed mid-write"
