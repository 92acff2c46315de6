import sys
from pathlib import Path

from kagglekit import env, gpus


def test_local_run_writes_under_runs(tmp_path):
    here = env.where()
    assert not here.on_kaggle and here.run_type == "local"
    assert env.working_dir("demo") == (tmp_path / "runs" / "demo").resolve()


def test_kaggle_is_detected_by_run_type_not_by_credentials(monkeypatch):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")  # developers have this locally
    assert not env.where().on_kaggle
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    here = env.where()
    assert here.on_kaggle and here.run_type == "Batch" and here.root == Path("/kaggle")


def test_simulated_kaggle_tree_gives_working_and_searchable_inputs(kaggle_tree):
    nested = kaggle_tree / "input" / "notebooks" / "me" / "my-kernel" / "checkpoints" / "m"
    nested.mkdir(parents=True)
    flat = kaggle_tree / "input" / "old-style-dataset"
    flat.mkdir()
    (flat / "train.csv").write_text("x\n")
    assert env.working_dir("demo") == (kaggle_tree / "working").resolve()
    assert env.find_inputs("checkpoints/m") == [nested]
    assert env.find_inputs("train.csv") == [flat / "train.csv"]


def test_cuda_visible_devices_is_applied_like_cuda_does():
    all_gpus = [gpus.GPU(i, "Tesla T4", 15.0, (7, 5), f"GPU-{i}aaaa") for i in range(2)]
    assert [g.uuid for g in gpus._visible(all_gpus, "1")] == ["GPU-1aaaa"]
    assert [g.index for g in gpus._visible(all_gpus, "1,0")] == [0, 1]
    assert gpus._visible(all_gpus, "") == []
    assert [g.uuid for g in gpus._visible(all_gpus, "GPU-0")] == ["GPU-0aaaa"]


def test_without_nvml_the_driver_is_asked_another_way(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails, as without the package
    monkeypatch.setenv("PATH", str(tmp_path))  # and no nvidia-smi
    proc = tmp_path / "gpus"
    read_proc = gpus._read_proc
    monkeypatch.setattr(gpus, "_read_proc", lambda: read_proc(proc))  # the driver's files here
    assert gpus.inventory() == []  # no NVML, no nvidia-smi, no driver files: a CPU machine
    for i in range(2):
        (proc / f"0000:0{i}:00.0").mkdir(parents=True)
        (proc / f"0000:0{i}:00.0" / "information").write_text(
            f"Model: \t\t Tesla T4\nGPU UUID: \t GPU-{i}\nBus Type: \t PCIe\n")
    found = gpus.inventory()  # a GPU machine is never mistaken for a CPU one
    assert [(g.name, g.capability, g.uuid) for g in found] == [("Tesla T4", (7, 5), "GPU-0"),
                                                             ("Tesla T4", (7, 5), "GPU-1")]


def test_seeding_repeats_every_generator():
    import random

    import numpy as np
    import torch
    env.seed_everything(3)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    env.seed_everything(3)
    assert first == (random.random(), np.random.rand(), torch.rand(1).item())


def test_a_run_on_other_gpus_than_pushed_for_says_so_loudly(capsys):
    t4 = [gpus.GPU(i, "Tesla T4", 15.0, (7, 5)) for i in range(2)]
    assert env.check_accelerator(t4, "2:T4")["ok"]
    assert "asked for" not in capsys.readouterr().err
    p100 = [gpus.GPU(0, "Tesla P100-PCIE-16GB", 16.0, (6, 0))]
    result = env.check_accelerator(p100, "2:T4")
    assert not result["ok"] and result["found"] == ["Tesla P100-PCIE-16GB"]
    assert "asked for 2 x T4 but got Tesla P100-PCIE-16GB" in capsys.readouterr().err


def test_the_kaggle_budget_counts_from_the_container_on_kaggle_and_from_the_kernel_when_simulated(
        monkeypatch, kaggle_tree):
    """A machine up for 13 hours must not end a simulated session at once (the sandbox's
    kernels and these tests simulate Kaggle on long-lived machines); on Kaggle the
    container's first process is the session's start."""
    import time

    from kagglekit import budget
    now = time.time()
    started = {1: now - 13 * 3600, "self": now - 5}
    monkeypatch.setattr(budget, "process_start_time", lambda pid="self": started[pid])
    assert budget.Budget.resolve(None).remaining() > 11 * 3600  # simulated: KAGGLEKIT_ROOT
    monkeypatch.delenv("KAGGLEKIT_ROOT")
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    assert budget.Budget.resolve(None).remaining() < 0  # real Kaggle: 13 h since the container began


def test_available_memory_is_the_containers_where_its_cgroup_leaves_less(tmp_path):
    """A container reads the whole machine's /proc/meminfo: its cgroup's limit less its usage is
    what it can still take (v2 and v1 layouts), and an unlimited cgroup ("max") changes nothing."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:       32000000 kB\nMemAvailable:   30000000 kB\n")
    assert env.available_memory(tmp_path) == 30000000 * 1024
    v2 = tmp_path / "sys" / "fs" / "cgroup"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("1000\n")
    assert env.available_memory(tmp_path) == 30000000 * 1024
    (v2 / "memory.max").write_text(f"{16 * 2**30}\n")
    (v2 / "memory.current").write_text(f"{4 * 2**30}\n")
    assert env.available_memory(tmp_path) == 12 * 2**30
    for name in ("memory.max", "memory.current"):
        (v2 / name).unlink()
    (v2 / "memory").mkdir()
    (v2 / "memory" / "memory.limit_in_bytes").write_text(f"{8 * 2**30}\n")
    (v2 / "memory" / "memory.usage_in_bytes").write_text(f"{2**30}\n")
    assert env.available_memory(tmp_path) == 7 * 2**30
