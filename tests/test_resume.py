"""Resume exactness: a run killed with SIGKILL and resumed ends bitwise equal to
an uninterrupted run with the same seed."""
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

JOB = Path(__file__).parent / "jobs" / "resume_job.py"
pytestmark = pytest.mark.slow


def _run(ckpt, out, *extra, env=None):
    import os
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, str(JOB), "--ckpt", str(ckpt), "--out", str(out), *extra],
                          capture_output=True, text=True, env=full_env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return torch.load(out, weights_only=True), proc.stdout


def _kill_at(ckpt, step, *extra, env=None):
    import os
    proc = subprocess.Popen([sys.executable, str(JOB), "--ckpt", str(ckpt), "--out", "/dev/null",
                             *extra], stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    for line in proc.stdout:
        if line.strip() == f"step {step}":
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, "the job finished before it could be killed"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("reference")
    result, _ = _run(d / "ckpt", d / "out.pt")
    assert result["resumed_from"] is None and result["stopped"] == "completed"
    return result


def _assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs after resume"


@pytest.mark.parametrize("workers", [0, 1])
def test_sigkill_at_a_random_step_then_resume_is_bitwise_equal(tmp_path, reference, workers):
    # 24 optimizer steps, 8 per epoch: a random step is usually mid-epoch.
    step = random.Random(workers).choice([s for s in range(2, 23) if s % 8])
    _kill_at(tmp_path / "ckpt", step, "--workers", str(workers))
    resumed, out = _run(tmp_path / "ckpt", tmp_path / "out.pt", "--workers", str(workers))
    assert resumed["resumed_from"] is not None, "it started over instead of resuming"
    first = next(int(line.split()[1]) for line in out.splitlines() if line.startswith("step "))
    # Every step is checkpointed after its hook printed it: at most step `step` is redone.
    assert first >= step, f"resumed at step {first}, but step {step} was already saved"
    _assert_same_weights(resumed["model"], reference["model"])
    assert [h["val_loss"] for h in resumed["history"]] == [h["val_loss"] for h in reference["history"]]


def test_resume_from_a_state_found_only_in_an_attached_input(tmp_path, reference):
    """Kernel version 1 is killed; version 2 sees v1's output read-only under input/."""
    v1 = tmp_path / "v1" / "working"
    _kill_at(v1 / "checkpoints" / "job", 13)
    root = tmp_path / "v2"
    shutil.copytree(v1, root / "input" / "notebooks" / "me" / "job-kernel")
    (root / "working").mkdir()
    resumed, out = _run(root / "working" / "checkpoints" / "job", tmp_path / "out.pt",
                        env={"KAGGLEKIT_ROOT": str(root)})
    assert "/input/notebooks/me/job-kernel/checkpoints/job/" in resumed["resumed_from"]
    _assert_same_weights(resumed["model"], reference["model"])
    # The new version writes its own checkpoints; the input stays untouched.
    assert list((root / "working" / "checkpoints" / "job").rglob("step-*.pt"))


T4X2 = {"KAGGLEKIT_EMULATE": "t4x2"}


def test_under_the_emulated_t4x2_fp16_and_its_scaler_resume_bitwise(tmp_path):
    """The T4's road on the CPU: fp16 autocast with a GradScaler, its state saved and resumed
    through the code a GPU run uses (the scaler's scale and growth tracker included)."""
    reference, _ = _run(tmp_path / "ref", tmp_path / "ref.pt", env=T4X2)
    assert reference["precision"] == "fp16"
    _kill_at(tmp_path / "ckpt", 13, env=T4X2)
    resumed, _ = _run(tmp_path / "ckpt", tmp_path / "out.pt", env=T4X2)
    assert resumed["resumed_from"] is not None and resumed["precision"] == "fp16"
    _assert_same_weights(resumed["model"], reference["model"])


def test_the_weights_moving_average_resumes_bitwise_under_the_emulated_t4x2(tmp_path):
    """fit(..., ema=kk.Ema(0.9)) killed mid-run: the averaged weights, and the validation scored on
    them, end as the uninterrupted run's."""
    reference, _ = _run(tmp_path / "ref", tmp_path / "ref.pt", "--ema", "0.9", env=T4X2)
    plain, _ = _run(tmp_path / "plain", tmp_path / "plain.pt", env=T4X2)
    _assert_same_weights(reference["model"], plain["model"])  # the average never touches the training
    assert reference["ema"].keys() == plain["model"].keys()
    assert not all(torch.equal(reference["ema"][k], plain["model"][k]) for k in plain["model"])
    assert [h["val_loss"] for h in reference["history"]] != [h["val_loss"] for h in plain["history"]]
    _kill_at(tmp_path / "ckpt", 13, "--ema", "0.9", env=T4X2)
    resumed, _ = _run(tmp_path / "ckpt", tmp_path / "out.pt", "--ema", "0.9", env=T4X2)
    assert resumed["resumed_from"] is not None
    _assert_same_weights(resumed["ema"], reference["ema"])
    assert [h["val_loss"] for h in resumed["history"]] == [h["val_loss"] for h in reference["history"]]


def test_an_fp32_run_moved_to_a_t4_resumes_under_fp16_with_a_fresh_scaler(tmp_path, reference):
    """Saved where the scaler was off (fp32: its state is empty), resumed on a T4 (fp16 needs
    one): before, GradScaler.load_state_dict raised "The source state dict is empty"."""
    _kill_at(tmp_path / "ckpt", 13)
    resumed, _ = _run(tmp_path / "ckpt", tmp_path / "out.pt", env=T4X2)
    assert resumed["resumed_from"] is not None and resumed["stopped"] == "completed"
    assert resumed["precision"] == "fp16"
