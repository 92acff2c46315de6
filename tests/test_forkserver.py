"""The kit's processes start clean: forked from the fork server, never from the notebook's
process. Each test here reproduces a way the T4 x2 road broke when ranks were forked from the
notebook (issue 47) and shows it no longer does, on CPU."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import Dataset

import kagglekit as kk
from kagglekit import forked, forkserver, heartbeat, launcher


class _Pids(Dataset):
    """Each sample says which process loaded it."""

    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.tensor([i, os.getpid()])


def _iterate_with_one_worker():
    loader = kk.make_loader(_Pids(), 8, num_workers=1)
    rows = torch.cat(list(loader))
    return {"samples": len(rows), "rank": kk.ranks.rank(), "rank_pid": os.getpid(),
            "loader_pids": sorted(set(rows[:, 1].tolist())), "workers": loader.num_workers}


def test_two_launched_ranks_iterate_a_loader_with_a_worker_each():
    """Before: ranks were daemonic processes, and "daemonic processes are not allowed to have
    children" ended each rank at its first batch."""
    out = kk.launch(_iterate_with_one_worker, nprocs=2)
    assert out["workers"] == 1 and out["samples"] == 16  # rank 0's half of the 32 samples
    [worker] = out["loader_pids"]
    assert worker not in (out["rank_pid"], os.getpid())  # loaded in the rank's own worker


OPENMP_AFTER_THE_NOTEBOOK = """
import json, os, time
import numpy as np, lightgbm as lgb
import kagglekit as kk

def train_trees(seed=0):  # defined here, in __main__: it travels to the children by value
    rng = np.random.default_rng(seed)
    x = rng.random((4000, 8))
    y = (x[:, 0] + x[:, 1] > 1).astype(int)
    params = {"objective": "binary", "num_threads": 2, "verbose": -1, "seed": seed}
    booster = lgb.train(params, lgb.Dataset(x, y), 20)
    return float(booster.predict(x[:100]).mean())

here = train_trees()  # the notebook's process runs GNU OpenMP's pool first: train, then predict
started = time.monotonic()
in_ranks = kk.launch(lambda: train_trees(kk.ranks.rank()), nprocs=2)
os.environ["KAGGLEKIT_EMULATE"] = "t4x2"  # isolated() runs in a process of its own where GPUs are
alone = kk.launcher.isolated(train_trees, 3)
print("RESULT", json.dumps({"here": here, "ranks": in_ranks, "isolated": alone,
                            "seconds": time.monotonic() - started}))
"""


@pytest.mark.slow
def test_lightgbm_trains_in_ranks_and_in_isolated_after_the_notebook_trained_with_it():
    """Before: GNU OpenMP's pool does not survive a fork, and a child forked after the notebook
    trained LightGBM waited forever in its first parallel region (both ranks still waiting at
    120 s). The children now fork from the clean server."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", OPENMP_AFTER_THE_NOTEBOOK], env=env,
                          capture_output=True, text=True, timeout=240)
    assert "RESULT" in done.stdout, done.stdout + done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT", 1)[1])
    assert 0.2 < out["ranks"] < 0.8 and 0.2 < out["isolated"] < 0.8
    print(f"LightGBM in two ranks and one isolated child after the notebook's: {out['seconds']:.1f} s")


def _sleep_in_native_code():
    if kk.ranks.rank() == 1:
        time.sleep(600)  # waits without using the CPU, on one line: what a hang looks like
    return "done"


def test_a_child_that_makes_no_progress_becomes_an_error_naming_where_it_waits(monkeypatch):
    monkeypatch.setenv(heartbeat.STALL_ENV, "3")
    started = time.monotonic()
    with pytest.raises(kk.launcher.LaunchError,
                       match=r"rank 1 made no progress for 3 s .*waits at .*test_forkserver.py:\d+ "
                             r"in _sleep_in_native_code"):
        kk.launch(_sleep_in_native_code, nprocs=2)
    assert time.monotonic() - started < 60
    assert not _alive_children()


def _busy_native_work(seconds: float):
    """One long native call that uses the CPU: a slow step is not a stall."""
    a = torch.randn(256, 256)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = (a @ a).tanh()
    return "worked"


def test_a_child_busy_on_one_line_is_not_taken_for_a_stalled_one(monkeypatch):
    monkeypatch.setenv(heartbeat.STALL_ENV, "2")
    assert forked.run_forked(lambda _: _busy_native_work(5.0), 1, what="worker") == "worked"


def test_what_cannot_travel_to_a_rank_is_named_with_the_fix(tmp_path):
    handle = open(tmp_path / "log.txt", "w")  # noqa: SIM115 - the object that cannot travel

    def uses_an_open_file():
        handle.write("x")

    try:
        with pytest.raises(forkserver.Unsendable,
                           match=r"launch\(\) cannot send `handle` \(a TextIOWrapper\) to its "
                                 r"processes .*Create it inside the launched function"):
            kk.launch(uses_an_open_file, nprocs=2)
    finally:
        handle.close()


def test_a_large_payload_is_said_with_its_largest_object(monkeypatch, capsys):
    monkeypatch.setattr(forkserver, "LARGE_BYTES", 1 << 20)
    table = torch.zeros(1 << 19)  # 2 MiB
    small = list(range(10))
    forkserver.pack(lambda: (table.sum(), small), "launch()")
    err = capsys.readouterr().err
    assert "launch() sends 0.0 GiB to each process (the largest: `table`" in err
    assert "Keep large data in a unit cached with mapped=True" in err


ORPHANED = """
import os, sys, time
import kagglekit as kk

def forever(path):
    with open(path + f".{kk.ranks.rank()}", "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.2)

kk.launch(forever, sys.argv[1], nprocs=2)
"""


def test_ranks_end_with_the_notebook_process_that_launched_them(tmp_path):
    """A notebook process killed outright (SIGKILL: no supervisor left) takes its ranks with it:
    each rank is asked to stop (SIGTERM when the server ends with the notebook; its heartbeat
    finds nobody listening) and ends after the grace a fit gets to save, even when its function
    never returns."""
    marker = str(tmp_path / "rank")
    env = {**os.environ, forked.STOP_GRACE_ENV: "2"}  # the time a fit would get to save
    parent = subprocess.Popen([sys.executable, "-c", ORPHANED, marker], env=env)
    try:
        pids = _wait_for_pids(marker, 2, timeout_s=120)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 60
        while any(_running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _running(p)]
    finally:
        parent.kill()


def _wait_for_pids(marker: str, count: int, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [f"{marker}.{r}" for r in range(count) if os.path.exists(f"{marker}.{r}")]
        texts = [open(f).read() for f in found]
        if len(found) == count and all(texts):
            return [int(t) for t in texts]
        time.sleep(0.1)
    raise AssertionError("the ranks never started")


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; its reaper may be gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _alive_children() -> list:
    import multiprocessing as mp
    deadline = time.monotonic() + 5
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return mp.active_children()


SERVER_THREADS = """
import json, os, sys
import catboost, lightgbm, optuna, pandas, sklearn, torch_geometric, transformers, xgboost  # a first cell
from sklearn.model_selection import StratifiedKFold  # a submodule the notebook imported
import kagglekit.score.hillclimb  # and one of the kit's
import kagglekit as kk
from kagglekit import forkserver


def at_start():
    # What a child has imported when its function starts (the server's modules, which it inherits),
    # and what of it its collections skip (the server froze them).
    import gc
    wanted = ("torch_geometric", "lightgbm", "xgboost", "catboost", "sklearn.model_selection",
              "transformers.models.auto.modeling_auto", "alembic.migration", "kagglekit.score.hillclimb")
    return {"preloaded": [m for m in wanted if m in sys.modules], "frozen": gc.get_freeze_count()}


child = kk.launch(at_start, nprocs=2)
pid = forkserver.server_pid()
threads = [open(f"/proc/{pid}/task/{t}/comm").read().strip() for t in os.listdir(f"/proc/{pid}/task")]
import gc
print("RESULT", json.dumps({"threads": threads, **child, "frozen_here": gc.get_freeze_count()}))
"""


def test_the_server_preloads_the_notebook_s_libraries_and_runs_no_thread_of_its_own():
    """Forking a process with threads is unsafe (an OpenMP pool above all): the server only
    imports (the kit, and the heavy libraries the notebook imported before kk.start) and forks.
    The one thread beside its main one is pyarrow's allocator's (jemalloc's background thread,
    which jemalloc's own fork handlers make safe), there when pandas is imported.
    Its children find imported what they would otherwise each import again: the submodules the
    notebook imported, the kit's, transformers' auto classes (imported on first use: 0.6 s of a
    text notebook's rank) and the migrations optuna's storage checks in each search worker; their
    collections skip the server's objects (gc.freeze), the notebook's own collections do not."""
    done = subprocess.run([sys.executable, "-c", SERVER_THREADS], capture_output=True, text=True, timeout=180)
    assert "RESULT" in done.stdout, done.stdout + done.stderr[-2000:]
    out = json.loads(done.stdout.split("RESULT", 1)[1])
    assert out["threads"].count("python") == 1 and set(out["threads"]) <= {"python", "jemalloc_bg_thd"}
    assert out["preloaded"] == ["torch_geometric", "lightgbm", "xgboost", "catboost", "sklearn.model_selection",
                                "transformers.models.auto.modeling_auto", "alembic.migration",
                                "kagglekit.score.hillclimb"]
    assert out["frozen"] > 100_000 and out["frozen_here"] == 0


class _CudaBooster:
    """Stands in for an XGBoost Booster trained on a GPU (this machine's XGBoost has no CUDA):
    its device travels in its pickle, and "cuda" opens the driver where it is loaded."""
    __module__ = "xgboost.core"

    def __init__(self):
        self.device = "cuda"

    def set_param(self, params):
        self.device = params.get("device", self.device)


def _train_xgboost(x):
    import xgboost as xgb
    return xgb.train({"max_depth": 2, "nthread": 2}, xgb.DMatrix(x, x[:, 0]), 5)


def test_an_xgboost_model_comes_back_from_isolated_set_to_predict_on_the_cpu(monkeypatch):
    import numpy as np
    import xgboost as xgb
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    assert launcher.isolated(_CudaBooster).device == "cpu"
    x = np.random.default_rng(0).random((200, 4))
    booster = launcher.isolated(_train_xgboost, x)  # a real one travels back and predicts here
    assert json.loads(booster.save_config())["learner"]["generic_param"]["device"] == "cpu"
    np.testing.assert_allclose(booster.predict(xgb.DMatrix(x)),
                               _train_xgboost(x).predict(xgb.DMatrix(x)), rtol=1e-6)


class _Quiet:
    """A child as the supervisor sees it: a sentinel never ready, nothing to stop."""

    def __init__(self):
        self.sentinel, self._write_end = os.pipe()

    def is_alive(self):
        return False

    def join(self, timeout=None):
        pass


def test_a_peer_s_lost_connection_read_before_a_restart_request_still_restarts():
    """A rank out of memory asks for the restart and leaves; its peer's collective fails on the
    closed connection. Read in rank order, the peer's error came first on a lent H100 and ended
    the launch; it must be the restart."""
    import multiprocessing
    import pickle
    pipes = [multiprocessing.Pipe(duplex=False) for _ in range(2)]
    pipes[1][1].send_bytes(pickle.dumps(("restart", 1, ("rank 1 ran out of CUDA memory", {"K": "1"}))))
    pipes[0][1].send_bytes(pickle.dumps(("error", 0, "RuntimeError: Connection closed by peer")))
    supervisor = forked._Supervisor([_Quiet(), _Quiet()], [r for r, _ in pipes], "rank", heartbeat.Watch(2, 60))
    with pytest.raises(forked.Restarting, match="ran out of CUDA memory") as restart:
        supervisor.run(timeout_s=5)
    assert restart.value.env == {"K": "1"}
    pipes = [multiprocessing.Pipe(duplex=False) for _ in range(2)]  # an error alone stays the error
    pipes[0][1].send_bytes(pickle.dumps(("error", 0, "ValueError: a bug in the rank")))
    pipes[1][1].send_bytes(pickle.dumps(("beat", 1, ("fit.py:10", 1.0))))
    supervisor = forked._Supervisor([_Quiet(), _Quiet()], [r for r, _ in pipes], "rank", heartbeat.Watch(2, 60))
    with pytest.raises(forked.LaunchError, match="a bug in the rank"):
        supervisor.run(timeout_s=5)


@pytest.mark.parametrize("stopped", [0, 1])
def test_a_peer_s_lost_connection_beside_a_rank_stopped_at_the_deadline_is_unfinished(stopped):
    """A rank stops at the session's deadline (kk.Unfinished) and leaves while its peer is still in
    a collective (joining the group, in CI: 1 run in ~15 under load); the peer's error on the
    closed connection must not turn the saved, resumable stop into a failed launch."""
    import multiprocessing
    import pickle
    pipes = [multiprocessing.Pipe(duplex=False) for _ in range(2)]
    pipes[stopped][1].send_bytes(pickle.dumps(("unfinished", stopped, f"rank {stopped}: the time ran out")))
    pipes[1 - stopped][1].send_bytes(pickle.dumps(("error", 1 - stopped, "RuntimeError: Connection closed by peer")))
    supervisor = forked._Supervisor([_Quiet(), _Quiet()], [r for r, _ in pipes], "rank", heartbeat.Watch(2, 60))
    with pytest.raises(kk.Unfinished, match=f"rank {stopped}: the time ran out; rank {1 - stopped} failed after it"):
        supervisor.run(timeout_s=5)


def test_a_function_reading_an_attribute_named_classes_beside_torch_is_sent():
    """cloudpickle sends the sub-modules a function can reach by attribute name; torch registers
    torch.classes, no module, in sys.modules, so a launched function using torch and `data.classes`
    could not be sent ("cannot pickle '_Classes' object"). It now travels by its name."""
    import types as _types

    from kagglekit.parallel import forkserver
    namespace = {"torch": torch}
    exec("def count(data):\n    return torch.tensor(len(data.classes))\n", namespace)
    count = _types.FunctionType(namespace["count"].__code__, namespace, "count")
    sent = forkserver.unpack(forkserver.pack(count))
    assert int(sent(_types.SimpleNamespace(classes=["a", "b", "c"]))) == 3


def test_a_rank_waiting_in_a_collective_is_not_named_while_the_peer_it_waits_for_moves():
    """Rank 0 at the group's final barrier, rank 1 hung elsewhere: rank 1 is the cause, named when
    it stalls; rank 0 alone is named only when every rank waits in a collective (a deadlock)."""
    watch = heartbeat.Watch(2, 1.0)
    watch.beat(0, "distributed/distributed_c10d.py:5356 in barrier", 1.0)
    watch.beat(1, "notebook.py:3 in train", 1.0)
    now = time.monotonic()
    watch.moved = [now - 5, now]  # rank 0 has waited long; rank 1 still moves
    assert watch.stalled([0, 1]) is None
    watch.moved[1] = now - 5
    assert watch.stalled([0, 1]) == 1
    watch.beat(1, "distributed/distributed_c10d.py:2900 in all_reduce", 1.0)
    watch.moved = [now - 5, now - 5]
    assert watch.stalled([0, 1]) == 0


def test_the_servers_import_list_keeps_to_one_environment_strings_limit(monkeypatch):
    """The list travels in one environment variable, and Linux refuses an exec whose one string
    passes 128 KiB (the server would never start): the list is cut at a whole name, the lazily
    imported modules first."""
    import transformers  # noqa: F401 - the notebook imported it

    from kagglekit.parallel import forkserver
    whole = forkserver._server_imports().split(",")
    assert whole[0] == "transformers.models.auto.modeling_auto" and "kagglekit.parallel.forked" in whole
    monkeypatch.setattr(forkserver, "SERVER_IMPORTS_MAX", 300)
    cut = forkserver._server_imports()
    assert len(cut) <= 300 and cut.split(",") == whole[:len(cut.split(","))]
