import json
import sys
import time

import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import datasets, loaders as data, models, monitor


def _fake_nvml(util_by_gpu: list[int]):
    """A stand-in pynvml module: ``len(util_by_gpu)`` GPUs at fixed utilisations."""
    import types
    from types import SimpleNamespace as NS
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: len(util_by_gpu)
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetUtilizationRates = lambda h: NS(gpu=util_by_gpu[h])
    fake.nvmlDeviceGetMemoryInfo = lambda h: NS(used=(h + 1) * 2**30, total=16 * 2**30)
    fake.nvmlDeviceGetPowerUsage = lambda h: 70_000
    fake.nvmlDeviceGetTemperature = lambda h, sensor: 60
    return fake


def test_the_sampler_reads_every_gpu_and_summarises_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([30, 90]))
    with monitor.GPUSampler(interval_s=0.02) as sampler:
        time.sleep(0.2)
    summary = sampler.summary()
    assert summary["available"] and summary["samples"] >= 4
    assert summary["gpus"][0]["util_mean"] == 30 and summary["gpus"][1]["util_mean"] == 90
    assert summary["gpus"][1]["mem_peak_mb"] == 2048 and summary["util_mean"] == 60


def test_without_nvml_the_sampler_reports_plainly(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with monitor.GPUSampler(interval_s=0.02) as sampler:
        time.sleep(0.05)
    summary = sampler.summary()
    assert not summary["available"]
    assert summary["reason"] == "no GPU monitoring: NVML unavailable (ModuleNotFoundError)"


class SlowData(torch.utils.data.Dataset):
    """A dataset whose loading dominates: the classic idle GPU."""

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        time.sleep(0.01)
        return self.base[i]


def test_a_slow_dataset_is_diagnosed_input_bound_and_the_advice_names_the_loader():
    kk.seed_everything(0)
    ds = SlowData(datasets.tabular(256, features=16))
    model = models.MLP(16, 32, 4)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), data.make_loader(ds, 32, num_workers=0),
                    kk.supervised(F.cross_entropy), epochs=1, progress=False, monitor=kk.Monitor(profile_every=2))
    d = result.diagnosis()
    assert result.breakdown["sampled_steps"] == 4
    assert d["verdict"] == "input-bound" and d["numbers"]["data_wait_pct"] > 50
    assert "num_workers" in d["advice"] and "no GPU" in d["text"]
    assert result.summary()["diagnosis"]["verdict"] == "input-bound"


def test_monitor_false_times_no_step_and_true_the_default_one_in_25():
    ds = datasets.tabular(64 * 8, features=16)
    sampled = {}
    for watched in (False, True):
        model = models.MLP(16, 32, 4)
        result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), data.make_loader(ds, 8, num_workers=0),
                        kk.supervised(F.cross_entropy), epochs=1, progress=False, monitor=watched)
        sampled[watched] = result.breakdown["sampled_steps"]
    assert sampled == {False: 0, True: 64 // 25 + 1}  # steps 0, 25, 50


def _timeline(data_wait, h2d, compute, optimizer):
    total = data_wait + h2d + compute + optimizer
    return {"sampled_steps": 10, "median_s": {"data_wait": data_wait, "h2d": h2d, "compute": compute,
                                              "optimizer": optimizer, "total": total},
            "fraction": {"data_wait": data_wait / total, "h2d": h2d / total,
                         "compute": compute / total, "optimizer": optimizer / total}}


def _gpu(util, mem_mb=4000):
    return {"available": True, "util_mean": util,
            "gpus": {0: {"util_mean": util, "mem_peak_mb": mem_mb, "mem_total_mb": 15360}}}


def test_verdicts_on_recorded_timelines():
    cases = [
        (_timeline(0.040, 0.005, 0.030, 0.005), _gpu(35), 0, "input-bound"),
        (_timeline(0.0002, 0.0001, 0.003, 0.001), _gpu(30), 0, "launch-bound"),
        (_timeline(0.001, 0.001, 0.060, 0.010), _gpu(45), 0, "host-sync-bound"),
        (_timeline(0.001, 0.001, 0.120, 0.010), _gpu(97), 0, "compute-bound"),
        (_timeline(0.001, 0.001, 0.120, 0.010), _gpu(90, mem_mb=15000), 0, "memory-bound"),
        (_timeline(0.001, 0.001, 0.120, 0.010), _gpu(90), 2, "memory-bound"),
        (_timeline(0.001, 0.001, 0.120, 0.010), None, 0, "cpu-only"),
    ]
    for breakdown, gpu, ooms, expected in cases:
        assert monitor.diagnose(breakdown, gpu, ooms)["verdict"] == expected, expected
    assert "CUDA-graph" in monitor.diagnose(*cases[1][:3])["advice"]
    assert ".item()" in monitor.diagnose(*cases[2][:3])["advice"]


def test_timing_is_sampled_not_every_step():
    kk.seed_everything(0)
    ds = datasets.tabular(640, features=16)
    model = models.MLP(16, 32, 4)
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), data.make_loader(ds, 32, num_workers=0),
                    kk.supervised(F.cross_entropy), epochs=1, progress=False, monitor=kk.Monitor(profile_every=5))
    assert result.steps == 20 and result.breakdown["sampled_steps"] == 4


def test_log_fit_keeps_metrics_small_and_saves_the_monitoring_plots():
    """A recorded two-GPU run of 1,000 samples a GPU: thinned for JSON, plotted per GPU."""
    samples = [{"t": i / 2, "gpu": g, "util": 50 + g, "mem_used_mb": 1000.0 + i,
                "mem_total_mb": 15360.0, "power_w": 60.0, "temp_c": 60}
               for i in range(1000) for g in (0, 1)]
    sampler = monitor.GPUSampler()
    sampler.samples = samples
    result = kk.FitResult(history=[{"epoch": 0, "val_loss": 0.5}], steps=10, epochs=1,
                          stopped="completed", seconds=5.0, precision="fp16", compile="eager",
                          breakdown=_timeline(0.0002, 0.0001, 0.003, 0.001),
                          gpu=sampler.summary(), gpu_samples=samples)
    timeline = result.summary()["gpu_timeline"]
    assert {g: sum(s["gpu"] == g for s in timeline) for g in (0, 1)} == {0: 250, 1: 250}
    run = kk.start({"seed": 0}, "monitored", declared={"seed": 0}, verbose=False)
    run.log_fit("fit", result)
    metrics = json.loads((run.output_dir / "metrics.json").read_text())
    assert "gpu_timeline" not in metrics["fit"]
    assert metrics["fit"]["diagnosis"]["verdict"] == "launch-bound"
    assert metrics["fit"]["gpu"]["gpus"]["1"]["util_mean"] == 51
    assert metrics["fit"]["history"] == [{"epoch": 0, "val_loss": 0.5}]  # the epochs' records, beside
    for png in ("fit_step_time.png", "fit_gpu.png", "fit_learning_curves.png"):
        assert (run.output_dir / png).stat().st_size > 5000


@pytest.mark.gpu
def test_on_gpu_the_breakdown_carries_memory_per_phase_and_nvml_samples():
    kk.seed_everything(0)
    model = models.MLP(256, 1024, 4, depth=4)
    loader = data.make_loader(datasets.tabular(64 * 400, features=256), 64, num_workers=0)
    result = kk.fit(model, torch.optim.AdamW(model.parameters()), loader, kk.supervised(F.cross_entropy),
                    run=kk.Alone(device="cuda"), epochs=3, progress=False, monitor=kk.Monitor(profile_every=10))
    assert result.breakdown["clock"] == "cuda events" and result.breakdown["sampled_steps"] == 120
    memory = result.breakdown["memory_mb"]
    assert memory["allocated_after"]["compute"] > 0 and memory["peak"] >= memory["allocated_after"]["h2d"]
    assert result.gpu["available"] and result.gpu["samples"] > 0


def test_the_cycle_loop_runs_the_callers_steps_at_their_own_width(tmp_path):
    """gpu_utilization crashed with its Kaggle parameters (size 512): the CPU part of each
    cycle was built at a default width. The steps are now the caller's, whatever their shape."""
    import numpy as np

    from kagglekit import cycles
    w = torch.randn(512, 512) / 512 ** 0.5
    rows = cycles.study(lambda c: np.full((4, 512), c % 7, dtype=np.float32), lambda x: x @ w, 16,
                        torch.device("cpu"), batch_cycles=4, save_every=8, folder=tmp_path)
    measured = {r["strategy"]: r for r in rows if "skipped" not in r}
    assert set(measured) == {"sync", "batched", "process_pool"}
    assert all(len(r["memory_curve_mb"]) == 16 and r["cycles_per_s"] > 0 for r in measured.values())
    saved = sorted((tmp_path / "sync").glob("save-*.pt"))
    assert [p.name for p in saved] == ["save-000008.pt", "save-000016.pt"]
    held = torch.load(saved[1], weights_only=True)  # cycles 8..15, each its own result
    assert len(held) == 8 and held[0].shape == (4, 512)
    assert torch.allclose(held[0], torch.full((4, 512), 8 % 7.0) @ w)

class StandinGraphedFunction:
    """cudagraph.GraphedFunction on CPU, with a capture's semantics and no graph: static input
    buffers each call copies into, one static output every replay overwrites (a caller keeping
    it without a copy would see every cycle turn into the last one), replays counted."""
    made: list = []

    def __init__(self, fn, example_inputs, warmup=3):
        self.fn, self.replays = fn, 0
        self.static_in = tuple(t.clone() for t in example_inputs)
        for _ in range(warmup):
            fn(*self.static_in)
        self.static_out = fn(*self.static_in)
        self.graph, self.status = object(), "cuda graph (CPU stand-in)"
        StandinGraphedFunction.made.append(self)

    def __call__(self, *inputs):
        for buf, value in zip(self.static_in, inputs):
            buf.copy_(value)
        self.static_out.copy_(self.fn(*self.static_in))
        self.replays += 1
        return self.static_out


def test_fifty_cycles_per_graph_replay_what_eager_cycles_compute(tmp_path, monkeypatch):
    """130 cycles, 50 per graph: two replays of one 50-cycle graph and 30 cycles eagerly; every
    cycle's result equals the synchronous loop's, bit for bit."""
    import numpy as np

    from kagglekit import cudagraph, cycles
    monkeypatch.setattr(cudagraph, "GraphedFunction", StandinGraphedFunction)
    StandinGraphedFunction.made = []
    w = torch.randn(64, 64) / 8
    cpu_step = lambda c: np.sin(np.arange(4 * 64, dtype=np.float32).reshape(4, 64) + c)  # noqa: E731
    gpu_step = lambda x: torch.tanh(x @ w)  # noqa: E731
    args = (cpu_step, gpu_step, 130, torch.device("cpu"))
    graphed = cycles.run("cuda_graph", *args, graph_cycles=50, save_every=10, folder=tmp_path / "g")
    eager = cycles.run("sync", *args, save_every=10, folder=tmp_path / "s")
    assert (graphed["graph_cycles"], graphed["replays"], graphed["eager_cycles"]) == (50, 2, 30)
    assert [g.replays for g in StandinGraphedFunction.made] == [2]
    assert "cycles_per_s" in eager and graphed["cycles_per_s"] > 0
    saved = sorted(p.name for p in (tmp_path / "g").glob("save-*.pt"))
    assert saved == sorted(p.name for p in (tmp_path / "s").glob("save-*.pt")) and len(saved) == 13
    for name in saved:
        a = torch.load(tmp_path / "g" / name, weights_only=True)
        b = torch.load(tmp_path / "s" / name, weights_only=True)
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b) == 10


@pytest.mark.parametrize("cpu_ms, gpu_ms, cores, workers", [
    (4.0, 0.5, 8, 7),  # the CPU part 8x the GPU step: as many as the cores allow less one
    (2.0, 1.0, 8, 2),  # twice: two workers keep up
    (0.2, 2.0, 8, 1),  # the GPU is the slower: one is enough
    (4.0, 0.5, 2, 1),  # a 2-core machine: one core drives the GPU
])
def test_the_process_pool_gets_the_workers_a_cycles_times_ask_for(cpu_ms, gpu_ms, cores, workers):
    from kagglekit import cycles
    assert cycles.workers_for(cpu_ms / 1e3, gpu_ms / 1e3, cores)[0] == workers


def test_the_pool_size_comes_from_a_measured_cycle(monkeypatch):
    """A CPU part of 20 ms against an instant GPU step asks for every core but one; the
    reverse for one worker (ratios far from any rounding edge: a loaded machine keeps them)."""
    import numpy as np

    from kagglekit import cycles
    monkeypatch.setattr(cycles.os, "sched_getaffinity", lambda pid: set(range(4)))
    slow_cpu = cycles.pool_workers(lambda c: time.sleep(0.02) or np.zeros(4, np.float32), lambda x: x,
                                   torch.device("cpu"), probe=4)
    slow_gpu = cycles.pool_workers(lambda c: np.zeros(4, np.float32), lambda x: time.sleep(0.02) or x,
                                   torch.device("cpu"), probe=4)
    assert (slow_cpu["workers"], slow_gpu["workers"]) == (3, 1)
    assert slow_cpu["cpu_ms"] >= 20 and "4 core(s), one drives the GPU" in slow_cpu["why"]


POOL_UNDER_A_KIT_CHILD = """
import os
import signal
import time
from kagglekit import cycles
signal.signal(signal.SIGTERM, lambda *_: None)  # a kit child's handler: SIGTERM asks a fit to stop
pids = []
try:
    with cycles._pool(2) as pool:
        pids = [worker.pid for worker in pool._pool]
        busy = [pool.apply_async(time.sleep, (600,)) for _ in pids]  # only a signal ends these
        time.sleep(1)
        raise RuntimeError("a step failed")
except RuntimeError:
    pass
alive = [p for p in pids if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
print("stopped", len(pids), "alive", len(alive))
"""


def test_the_cycle_pool_under_a_kit_child_stops_on_an_error_instead_of_waiting_forever():
    """Forked from a kit child, pool workers inherited its SIGTERM handler, survived
    Pool.terminate and left its join (and the sandbox reading the notebook's output) waiting
    forever. The pool's workers take the default back: terminate ends them."""
    import subprocess
    done = subprocess.run([sys.executable, "-c", POOL_UNDER_A_KIT_CHILD], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["stopped", "2", "alive", "0"]
