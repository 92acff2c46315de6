"""What a long Kaggle run meets: NaN losses, a full disk, the Stop button, dead ranks and
loader workers, missing NVML. Each ends in a saved state or an error that names it."""
import errno
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, gpus, guards, loaders as data, models, space
from kagglekit.machine.precision import Precision
from kagglekit.parallel.launcher import LaunchError, launch
from kagglekit.state.checkpoint import CheckpointManager

JOB = Path(__file__).parent / "jobs" / "resume_job.py"


def _nan_loss(at_call: int, only_half: bool):
    """Cross-entropy that turns NaN from call ``at_call`` on (under fp16 only, if asked):
    what an fp16 overflow does to a loss."""
    calls = {"n": 0}

    def loss_fn(model, batch):
        x, y = batch
        logits = model(x)
        calls["n"] += 1
        half = logits.dtype in (torch.float16, torch.bfloat16)  # fp16 on a CPU computes in bf16
        if calls["n"] >= at_call and (half or not only_half):
            return (logits.float().sum() * float("nan"))
        return F.cross_entropy(logits.float(), y)
    return loss_fn


def _fit(ckpt, loss_fn, precision, epochs=3):
    kk.seed_everything(0)
    model = models.MLP(16, 32, 4)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    data.make_loader(datasets.tabular(512, features=16), 32, num_workers=0), loss_fn, epochs=epochs,
                    checkpoints=ckpt, progress=False, speed=kk.Speed(precision=precision))
    return model, result


def test_a_nan_under_automatic_fp16_goes_on_in_fp32_from_the_last_good_checkpoint(tmp_path, half_kernels):
    ckpt = CheckpointManager(tmp_path, search=[])
    model, result = _fit(ckpt, _nan_loss(at_call=20, only_half=True),
                         Precision("fp16", "cpu", auto=True))
    assert result.stopped == "completed" and result.precision == "fp32"
    [event] = result.precision_events
    assert event["from"] == "fp16" and event["to"] == "fp32"
    assert event["steps"][0] <= 19 + 1 <= event["steps"][1] <= 32  # the bad step (the 20th) is in
    assert event["resumed_at_step"] == 16  # the end of the first epoch: the last good save
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert result.steps == 48 and result.summary()["precision_events"] == [event]
    # The next session carries on in fp32, not back in fp16.
    again = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                   data.make_loader(datasets.tabular(512, features=16), 32, num_workers=0),
                   _nan_loss(1, only_half=True), epochs=3, checkpoints=CheckpointManager(tmp_path, search=[]),
                   progress=False, speed=kk.Speed(precision=Precision("fp16", "cpu", auto=True)))
    assert again.stopped == "already_complete"


def test_a_nan_under_fp32_stops_with_the_good_checkpoint_kept_and_named(tmp_path):
    ckpt = CheckpointManager(tmp_path, search=[])
    with pytest.raises(guards.NonFiniteLoss, match=r"loss became nan between steps 17 and 32 "
                                                   r"\(fp32\).*step-00000016\.pt.*clip_grad_norm"):
        _fit(ckpt, _nan_loss(at_call=20, only_half=False), "fp32")
    found, state = ckpt.load_latest()
    assert found.step == 16  # nothing after the NaN was saved
    assert all(torch.isfinite(v).all() for v in state["model"].values())


def test_a_full_disk_mid_save_keeps_the_previous_checkpoint_and_names_the_folder(tmp_path, monkeypatch):
    ckpt = CheckpointManager(tmp_path, search=[])
    ckpt.save({"model": {"w": torch.ones(4)}}, step=1)
    real_save = torch.save

    def full(obj, f, *a, **k):
        real_save(obj, f, *a, **k)  # part of it on disk, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(space.CheckpointSpaceError, match=f"no space left in {tmp_path}.*intact"):
        ckpt.save({"model": {"w": torch.full((4,), 2.0)}}, step=2)
    monkeypatch.setattr(torch, "save", real_save)
    found, state = CheckpointManager(tmp_path, search=[]).load_latest()
    assert found.step == 1 and torch.equal(state["model"]["w"], torch.ones(4))
    assert not list(tmp_path.glob(".*.tmp"))


def test_retention_that_would_not_fit_is_warned_about_before_the_first_save(tmp_path, monkeypatch):
    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: type("U", (), {"free": 10 * 2**20})())
    ckpt = CheckpointManager(tmp_path, keep_last=3, search=[])
    with pytest.warns(UserWarning, match=r"~8 MB each, 3 kept plus the best, need ~40 MB, but only "
                                         r"10 MB free.*keep_last \(now 3\)"):
        ckpt.save({"model": {"w": torch.zeros(2 * 2**20)}}, step=1)


def _kill_with(signum, ckpt, step):
    # 0.2 s a step: the signal lands mid-run even when this process reads the step late (a busy
    # machine let the job finish all 24 steps before "step 11" was read here).
    proc = subprocess.Popen([sys.executable, str(JOB), "--ckpt", str(ckpt), "--out", "/dev/null",
                             "--save-every", "none", "--sleep", "0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.strip() == f"step {step}":
            proc.send_signal(signum)
            break
    out, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_stop_button_saves_mid_epoch_and_the_next_run_resumes_bitwise(tmp_path, signum):
    reference = subprocess.run([sys.executable, str(JOB), "--ckpt", str(tmp_path / "ref"), "--out",
                                str(tmp_path / "ref.pt")], capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    code, err = _kill_with(signum, tmp_path / "ckpt", 11)  # epochs are 8 steps: mid-epoch 2
    assert code != 0 and "Interrupted: stopped on request at step" in err
    resumed = subprocess.run([sys.executable, str(JOB), "--ckpt", str(tmp_path / "ckpt"), "--out",
                              str(tmp_path / "out.pt"), "--save-every", "none"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    first = int(next(line for line in resumed.stdout.splitlines() if line.startswith("step ")).split()[1])
    assert first >= 12  # saved where it was stopped (only epoch ends would have given 9)
    a, b = torch.load(tmp_path / "ref.pt", weights_only=True), torch.load(tmp_path / "out.pt", weights_only=True)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k])


def _die_on_rank_one():
    if kk.ranks.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # what the host's OOM killer does
    time.sleep(60)


def test_a_rank_killed_by_the_host_is_named_with_its_signal_within_seconds():
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"rank 1 was killed by SIGKILL \(signal 9\).*out-of-memory"):
        launch(_die_on_rank_one, nprocs=2, timeout_s=120)
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 5
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not mp.active_children()


class _Stalls(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i >= 0 and torch.utils.data.get_worker_info() is not None:
            time.sleep(3600)  # a worker stuck on a read
        return torch.zeros(4), 0


class _Dies(_Stalls):
    def __getitem__(self, i):
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("dataset, message", [(_Stalls(), "timed out"), (_Dies(), "exited unexpectedly")])
def test_a_stalled_or_dead_loader_worker_is_a_named_error(dataset, message):
    model = torch.nn.Linear(4, 2)
    loader = data.make_loader(dataset, 8, num_workers=1, timeout_s=2)
    with pytest.raises(data.LoaderError, match=f"(?s){message}.*one of 1 loader workers"):
        kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loader,
               kk.supervised(F.cross_entropy), epochs=1, progress=False)


def _say_something(_):
    print(f"hello from rank {kk.ranks.rank()}", flush=True)
    if kk.ranks.rank() == 1:
        raise ValueError("rank one gives up")


def test_each_launched_rank_writes_its_own_log(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_LOG_DIR", str(tmp_path / "logs"))
    with pytest.raises(LaunchError, match=r"rank 1 failed \(its log: .*rank1\.log\)"):
        launch(_say_something, None, nprocs=2, timeout_s=60)
    rank0, rank1 = ((tmp_path / "logs" / f"rank{r}.log").read_text() for r in (0, 1))
    assert "rank0 | hello from rank 0" in rank0 and "rank 1" not in rank0
    assert "rank1 | hello from rank 1" in rank1 and "ValueError: rank one gives up" in rank1


def test_without_nvml_the_inventory_comes_from_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, Tesla T4, 15360, 7.5, GPU-aaa'\necho '1, Tesla T4, 15360, 7.5, GPU-bbb'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    found = gpus.inventory()
    assert [(g.name, g.capability, g.memory_gb) for g in found] == [("Tesla T4", (7, 5), 15.0)] * 2


def test_without_any_gpu_a_run_pushed_for_two_t4s_stops_with_a_named_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    monkeypatch.setattr(gpus, "_read_proc", lambda *a: [])
    monkeypatch.setenv("KAGGLEKIT_EXPECT_GPUS", "2:T4")
    with pytest.raises(kk.env.AcceleratorError, match="asked for 2 x T4.*no GPU can be used"):
        kk.start({"seed": 0}, "no-gpu", declared={"seed": 0}, verbose=False)


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
def test_the_stop_button_under_ddp_makes_every_rank_save_at_one_step(tmp_path):
    """The job starts with SIGINT ignored, as a background job of a non-interactive shell does
    (a CI runner, `make test &`): Python then installs no KeyboardInterrupt handler of its own,
    and before the fix the press was lost and the ranks trained all 128 steps."""
    job = Path(__file__).parent / "jobs" / "ddp_stop_job.py"
    proc = subprocess.Popen([sys.executable, str(job), str(tmp_path), "0.05"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_ignore_sigint)
    for line in proc.stdout:
        if line.strip() == "step 20":  # mid-epoch (64 steps an epoch), saves only at epoch ends
            proc.send_signal(signal.SIGINT)  # the notebook's parent process, as Jupyter does
            break
    out, err = proc.communicate(timeout=180)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    saved = sorted(int(p.stem.split("-")[1]) for p in tmp_path.rglob("step-*.json"))
    assert saved and saved[-1] % 16 == 0 and saved[-1] >= 32  # the ranks' next agreement step
    again = subprocess.run([sys.executable, str(job), str(tmp_path), "0"], capture_output=True,
                           text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    assert f"'steps': 128, 'this_session': {128 - saved[-1]}" in again.stdout


def test_a_stop_asked_before_the_fit_began_stops_it_at_its_first_step(tmp_path):
    """A launched rank's SIGTERM may arrive while it still prepares its data: the request waits
    for the fit instead of being cleared by it (the rank would otherwise train until killed)."""
    kk.signals.request_stop()
    with pytest.raises(kk.signals.Interrupted, match="at step 1"):
        _fit(CheckpointManager(tmp_path, search=[]), kk.supervised(F.cross_entropy), "fp32")
    assert not kk.signals.stop_requested()  # used up: the next fit trains
    assert [p.name for p in tmp_path.rglob("step-*.pt")] == ["step-00000001.pt"]


def test_ctrl_c_on_make_run_says_one_line_and_no_traceback(tmp_path):
    """Ctrl-C on `make run` (SIGINT to the CLI; jupyter_client interrupts the kernel, whose fit saves
    and stops): one line saying how to resume, exit 130; not papermill's and asyncio's tracebacks."""
    repo = Path(__file__).resolve().parents[1]
    cli = subprocess.Popen([sys.executable, "-m", "kagglekit.tools.cli", "run", "quickstart", "--output",
                            str(tmp_path), "-p", "epochs=200"], cwd=repo, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,  # Ctrl-C's default, as in a terminal: an
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # xdist worker ignores it
    assert cli.stdout.readline().startswith("== quickstart: running")  # the kernel's start is under way
    deadline = time.monotonic() + 300
    while not list(tmp_path.rglob("step-*.pt")) and time.monotonic() < deadline and cli.poll() is None:
        time.sleep(0.2)  # until the fit has saved its first epoch: Ctrl-C lands in the training
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "future: <Task" not in err
    assert "== quickstart: stopped by Ctrl-C" in err and "the same make run resumes it" in err
