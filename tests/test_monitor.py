import json
import sys
import time

import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import data, datasets, models, monitor


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
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    data.make_loader(ds, 32, num_workers=0), kk.supervised(F.cross_entropy),
                    epochs=1, profile_every=2, progress=False)
    d = result.diagnosis()
    assert result.breakdown["sampled_steps"] == 4
    assert d["verdict"] == "input-bound" and d["numbers"]["data_wait_pct"] > 50
    assert "num_workers" in d["advice"] and "no GPU" in d["text"]
    assert result.summary()["diagnosis"]["verdict"] == "input-bound"


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
    result = kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    data.make_loader(ds, 32, num_workers=0), kk.supervised(F.cross_entropy),
                    epochs=1, profile_every=5, progress=False)
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
    for png in ("fit_step_time.png", "fit_gpu.png"):
        assert (run.output_dir / png).stat().st_size > 5000


@pytest.mark.gpu
def test_on_gpu_the_breakdown_carries_memory_per_phase_and_nvml_samples():
    kk.seed_everything(0)
    model = models.MLP(256, 1024, 4, depth=4)
    loader = data.make_loader(datasets.tabular(64 * 400, features=256), 64, num_workers=0)
    result = kk.fit(model, torch.optim.AdamW(model.parameters()), loader,
                    kk.supervised(F.cross_entropy), epochs=3, device="cuda", profile_every=10,
                    progress=False)
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