"""launch(): DDP from inside a notebook, tested with 2 gloo processes on CPU."""
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, launcher as launch_mod, loaders as data, models, step
from kagglekit.parallel.launcher import LaunchError, launch

LOSS = kk.supervised(F.cross_entropy)


def _train(per_gpu_batch: int, steps: int, accumulate: int = 1, oom_above: dict | None = None,
           oom_backoff: bool = True):
    """Trains the same model from the same seed; returns (weights, fit summary)."""
    kk.seed_everything(0)
    ds = datasets.tabular(512, features=16, seed=0)
    model = models.MLP(16, 32, 4)
    if oom_above is not None:
        model = _OomAbove(model, oom_above.get(kk.ranks.rank()))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    result = kk.fit(model, opt, data.make_loader(ds, per_gpu_batch, num_workers=0), LOSS, epochs=10, max_steps=steps,
                    accumulate=accumulate, progress=False, speed=kk.Speed(oom_backoff=oom_backoff))
    inner = model.inner if oom_above is not None else model
    return {k: v.clone() for k, v in inner.state_dict().items()}, result.summary()


class _OomAbove(torch.nn.Module):
    """Raises CUDA's out-of-memory error for batches larger than ``limit`` (None: never), from
    its ``after_calls``-th forward on."""

    def __init__(self, inner, limit, after_calls: int = 0):
        super().__init__()
        self.inner, self.limit, self.after_calls, self.calls = inner, limit, after_calls, 0

    def forward(self, x):
        self.calls += 1
        if self.limit is not None and x.shape[0] > self.limit and self.calls > self.after_calls:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated by the test)")
        return self.inner(x)


def _no_children_left():
    deadline = time.monotonic() + 5
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not mp.active_children()


def test_ddp_on_two_processes_equals_one_process_on_the_global_batch():
    ddp_weights, summary = launch(_train, 16, 6, nprocs=2)
    one_weights, _ = _train(32, 6)
    assert summary["world_size"] == 2 and summary["samples_per_s_per_gpu"] > 0
    for k in one_weights:
        torch.testing.assert_close(ddp_weights[k], one_weights[k], rtol=1e-5, atol=1e-6)


def test_distributed_shards_are_disjoint_and_cover_the_data():
    ds = list(range(101))
    shards = [list(data.ResumableSampler(ds, seed=3, num_replicas=2, rank=r, drop_last=True))
              for r in (0, 1)]
    assert not set(shards[0]) & set(shards[1])
    assert len(set(shards[0]) | set(shards[1])) == 100  # drop_last: one sample left out
    padded = [list(data.ResumableSampler(ds, seed=3, num_replicas=2, rank=r)) for r in (0, 1)]
    assert set(padded[0]) | set(padded[1]) == set(ds)


def _grads_with_and_without_skipped_sync():
    kk.seed_everything(0)
    model = torch.nn.parallel.DistributedDataParallel(models.MLP(16, 32, 4))
    g = torch.Generator().manual_seed(kk.ranks.rank())
    batches = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g))
               for _ in range(3)]
    policy, scaler = kk.precision.choose("fp32", None), torch.amp.GradScaler("cpu", enabled=False)
    step.backward(model, batches, LOSS, policy, scaler)  # no_sync on 2 of 3
    skipped = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for x, y in batches:  # all-reduce after every micro-batch
        (LOSS(model, (x, y)) / 3).backward()
    return skipped, [p.grad.clone() for p in model.parameters()]


def test_accumulation_with_skipped_sync_equals_accumulation_without_it():
    skipped, synced = launch(_grads_with_and_without_skipped_sync, nprocs=2)
    for a, b in zip(skipped, synced):
        torch.testing.assert_close(a, b)


def _fail_on_rank_one():
    if kk.ranks.rank() == 1:
        raise ValueError("bad shard on purpose")
    dist.barrier()  # rank 0 would wait here forever without the supervisor


def test_a_failing_rank_is_raised_with_its_traceback_and_nothing_is_left_running():
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"(?s)rank 1 failed:.*ValueError: bad shard on purpose"):
        launch(_fail_on_rank_one, nprocs=2, timeout_s=120)
    assert time.monotonic() - started < 30  # not the 120 s collective timeout
    assert _no_children_left()


def _hang_in_a_collective():
    if kk.ranks.rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins
    else:
        time.sleep(60)


def test_a_hanging_collective_ends_in_an_error_after_the_timeout():
    with pytest.raises(LaunchError, match="rank 0 failed"):
        launch(_hang_in_a_collective, nprocs=2, timeout_s=3)
    assert _no_children_left()


STANDIN_DRIVER = """
import _ctypes, ctypes, json, os, shutil, sys
import kagglekit as kk
# A library named like NVIDIA's OpenCL driver (a copy of a harmless extension module), mapped
# into this process as LightGBM's GPU build maps the real one when it trains; and torch's own
# flag set, as a tensor put on cuda:0 in an earlier cell sets it.
shutil.copy(_ctypes.__file__, sys.argv[1])
ctypes.CDLL(sys.argv[1])
import torch
torch.cuda.is_initialized = lambda: True
told = kk.driver.opened()

def where_am_i(x):  # defined here, in __main__: it travels by value
    return {"sum": x + kk.ranks.rank(), "pid": os.getpid(),
            "standin_mapped": any(sys.argv[1] in p for p in kk.driver.mapped_driver_libraries())}

ranks = kk.launch(where_am_i, 1, nprocs=2)
os.environ["KAGGLEKIT_EMULATE"] = "t4x2"
alone = kk.launcher.isolated(where_am_i, 5)
print("RESULT", json.dumps({"told": told, "ranks": ranks, "isolated": alone, "pid": os.getpid()}))
"""


def test_a_launch_after_a_gpu_driver_was_opened_here_still_starts_clean_ranks(tmp_path):
    """The notebook's process opened the driver (the stand-in library LightGBM's GPU build
    maps, and torch's flag): before, every later launch was refused; now the ranks and the
    isolated child start from the clean server, where nothing of it is mapped."""
    import subprocess
    import sys
    standin = tmp_path / "libnvidia-opencl.so.1"
    done = subprocess.run([sys.executable, "-c", STANDIN_DRIVER, str(standin)], capture_output=True,
                          text=True, timeout=180)
    assert "RESULT" in done.stdout, done.stdout + done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT", 1)[1])
    assert any(str(standin) in t and "OpenCL" in t for t in out["told"])  # the kit saw it open
    assert out["ranks"]["sum"] == 1 and out["isolated"]["sum"] == 5
    for child in (out["ranks"], out["isolated"]):
        assert child["pid"] != out["pid"] and not child["standin_mapped"]
    assert kk.driver.mapped_driver_libraries() == []  # this process never mapped one


def _pid():
    return os.getpid()


def test_an_isolated_function_runs_in_a_process_of_its_own_where_a_gpu_is_seen(monkeypatch):
    assert launch_mod.isolated(_pid) == os.getpid()  # no GPU: here
    monkeypatch.setenv("KAGGLEKIT_FAKE_GPUS", "Tesla T4:7.5:15")
    assert launch_mod.isolated(_pid) != os.getpid()


def test_one_device_runs_in_process_and_returns_the_value():
    assert launch(lambda a, b=0: a + b, 2, b=3) == 5
    assert launch_mod.resolve_strategy("auto", 0, None) == ("single", 1)
    assert launch_mod.resolve_strategy("auto", 2, None) == ("ddp", 2)
    assert launch_mod.resolve_strategy("dp", 2, None) == ("dp", 1)


def test_oom_on_one_rank_restarts_every_rank_with_smaller_batches_and_trains_the_same():
    # Rank 1 runs out of memory above 8 samples; rank 0 never would on its own.
    weights, summary = launch(_train, 16, 6, nprocs=2, oom_above={1: 8})
    assert summary["oom_count"] == 1 and summary["oom_events"][0] == {
        "step": 0, "per_gpu_batch": 8, "rank": 1}
    assert summary["steps"] == 6 and summary["stopped"] == "max_steps"
    assert "KAGGLEKIT_OOM" not in os.environ  # the restart's plan ends with the launch
    reference, _ = _train(32, 6)
    for k in reference:  # smaller chunks, same effective batch: the same training
        torch.testing.assert_close(weights[k], reference[k], rtol=1e-5, atol=1e-6)


def _train_then_oom(ckpt: str):
    """Rank 1 runs out of memory at its 4th step (above 8 samples); checkpoints every step."""
    kk.seed_everything(0)
    model = _OomAbove(models.MLP(16, 32, 4), 8 if kk.ranks.rank() == 1 else None, after_calls=3)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.5),
                    data.make_loader(datasets.tabular(512, features=16, seed=0), 16, num_workers=0),
                    LOSS, epochs=10, max_steps=6, progress=False,
                    checkpoints=kk.CheckpointManager(ckpt, search=[], save_every_min=0))
    return {k: v.clone() for k, v in model.inner.state_dict().items()}, result.summary()


def test_oom_mid_run_under_ddp_resumes_from_the_ranks_own_save_of_that_step(tmp_path):
    weights, summary = launch(_train_then_oom, str(tmp_path), nprocs=2)
    assert summary["resumed_from"].endswith("step-00000003-r1.pt")  # where the step started
    assert summary["steps_this_session"] == 3 and summary["oom_events"] == [
        {"step": 3, "per_gpu_batch": 8, "rank": 1}]
    reference, _ = _train(32, 6)
    for k in reference:
        torch.testing.assert_close(weights[k], reference[k], rtol=1e-5, atol=1e-6)


def test_oom_below_the_floor_gives_up_with_a_clear_error():
    with pytest.raises(step.OutOfMemoryFloor, match="per-GPU batch of 1"):
        _train(16, 2, oom_above={0: 0})


@pytest.mark.slow
def test_launch_from_a_notebook_run_by_papermill_returns_rank_zeros_value(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from kagglekit.tools.notebook_runner import run_notebook
    nb = new_notebook(cells=[
        new_code_cell("nprocs = 2", metadata={"tags": ["parameters"]}),
        new_code_cell(
            "import json, torch, torch.distributed as dist\n"
            "from kagglekit.parallel.launcher import launch\n"
            "torch.ones(64, 64) @ torch.ones(64, 64)  # the parent used torch before forking\n"
            "def work(scale):  # defined in the notebook: only fork can run it\n"
            "    t = torch.tensor([float(dist.get_rank() + 1)])\n"
            "    dist.all_reduce(t)\n"
            "    return {'rank': dist.get_rank(), 'world': dist.get_world_size(), 'sum': scale * t.item()}\n"
            "result = launch(work, 10, nprocs=nprocs)\n"
            "json.dump(result, open('result.json', 'w'))"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "launch_demo.ipynb"
    nbformat.write(nb, path)
    run_notebook(path, {}, output_dir=tmp_path / "out", progress=False)
    assert json.loads((tmp_path / "result.json").read_text()) == {"rank": 0, "world": 2, "sum": 30.0}


def _stop_requested_on_rank_one():
    kk.seed_everything(0)
    ds = datasets.tabular(2048, features=16, seed=0)
    model = models.MLP(16, 32, 4)

    def hook(state):
        if kk.ranks.rank() == 1 and state.step == 3:
            state.request_stop()

    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    data.make_loader(ds, 16, num_workers=0), LOSS, epochs=1, on_step_end=hook,
                    progress=False)
    return result.stopped, result.steps


def test_a_stop_asked_by_one_rank_stops_every_rank_at_the_same_step():
    from kagglekit.loop.epochs import AGREE_EVERY
    assert launch(_stop_requested_on_rank_one, nprocs=2, join_timeout_s=120) == \
        ("requested", AGREE_EVERY)  # decided together at the next agreement step, no hang


@pytest.mark.slow
def test_ranks_forked_after_the_notebook_ran_a_parallel_op_do_not_hang():
    """Before: each rank took cpus / ranks threads (2 on Kaggle's 4 vCPUs) and its first parallel
    op waited forever on OpenMP pool threads that did not survive the fork."""
    import os
    import subprocess
    import sys
    job = Path(__file__).parent / "jobs" / "threads_job.py"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "RANKS DONE" in done.stdout, done.stdout + done.stderr[-2000:]


def _resume_where_rank_one_sees_an_older_folder(ckpt: str, hide: int | None):
    kk.seed_everything(0)
    manager = kk.CheckpointManager(ckpt, search=[], save_every_min=0)
    if hide is not None and kk.ranks.rank() == 1:  # it read the folder before the newest save
        candidates = manager.candidates
        manager.candidates = lambda: [f for f in candidates() if f.step != hide]
    model = models.MLP(16, 32, 4)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.5),
                    data.make_loader(datasets.tabular(512, features=16, seed=0), 16, num_workers=0),
                    LOSS, epochs=10, max_steps=12 if hide else 8, progress=False, checkpoints=manager)
    return result.summary()


def test_every_rank_resumes_from_the_checkpoint_rank_zero_chose(tmp_path):
    """Each rank looking for itself could pick another checkpoint while saves land (before:
    rank 0 at step 8, rank 1 at step 7, their collectives out of step until the timeout)."""
    launch(_resume_where_rank_one_sees_an_older_folder, str(tmp_path), None, nprocs=2)
    resumed = launch(_resume_where_rank_one_sees_an_older_folder, str(tmp_path), 8, nprocs=2,
                     timeout_s=30)
    assert resumed["resumed_from"].endswith("step-00000008.pt")
    assert resumed["steps"] == 12 and resumed["steps_this_session"] == 4


def test_under_torchrun_each_rank_takes_its_own_card_before_any_context_opens(monkeypatch):
    """torchrun's ranks were never put on their card: every rank's NCCL and allocator began on
    cuda:0. (No GPU here: the card is recorded, not opened.)"""
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.MonkeyPatch.context() as gpu:
        taken = []
        gpu.setattr(kk.ranks, "cuda_visible", lambda: True)
        gpu.setattr(torch.cuda, "set_device", taken.append)
        assert launch_mod.take_local_device() == torch.device("cuda:1")
        assert taken == [torch.device("cuda:1")]
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")  # the emulated T4s compute on the CPU
    assert launch_mod.take_local_device() == torch.device("cpu")


def _validate_where_rank_one_has_no_batches():
    """A model with buffers (BatchNorm: DDP broadcasts them in a forward after a training step)
    validated on batches only rank 0 holds, as a short last shard leaves a rank none."""
    kk.seed_everything(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 4))
    ds = datasets.tabular(64, features=16, seed=0)
    x, y = ds.tensors[0][:32], ds.tensors[1][:32]
    val = [(x, y)] if kk.ranks.rank() == 0 else []
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    data.make_loader(ds, 8, num_workers=0), LOSS, epochs=1, limit_batches=2,
                    evaluate=kk.evaluate.classification(val, torch.device("cpu")), progress=False)
    return result.history[-1]["val_acc"], result.history[-1]["val_loss"]


def test_a_rank_without_validation_batches_validates_with_the_others():
    """Validation went through DDP's wrapper, whose forward may broadcast buffers: a rank with no
    batches never joined, and the collectives fell out of step."""
    acc, loss = launch(_validate_where_rank_one_has_no_batches, nprocs=2, timeout_s=30)
    assert 0.0 <= acc <= 1.0 and loss == loss  # rank 0's 32 samples, summed over both ranks
