"""Local runs keep their history: one folder per configuration, failures recorded,
results on screen."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kagglekit.tools import runfolders

REPO = Path(__file__).resolve().parents[1]


def _run(out: Path, *params: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    args = [a for p in params for a in ("-p", p)]
    return subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", "quickstart", *args,
                           "--output", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_folder_names_are_readable_and_follow_the_configuration():
    defaults = {"epochs": 8, "lr": 3e-3, "force_retrain": False, "data_dir": ""}
    plain = runfolders.folder_name(defaults, {})
    assert plain.startswith("defaults-") and plain == runfolders.folder_name(defaults, {"epochs": 8})
    assert runfolders.folder_name(defaults, {"force_retrain": True}) == plain  # same run, redone
    other = runfolders.folder_name(defaults, {"lr": 0.01, "data_dir": "/data/my set"})
    assert other.startswith("data_dir=_data_my_set,lr=0.01-") and other != plain


def test_the_headline_on_screen_shows_a_line_without_a_value_as_its_words_alone():
    import kagglekit as kk
    lines = [kk.headline("test PR-AUC", 0.81234, baseline=0.17, vs="MLP"),
             kk.headline("scaling: not measurable here (needs two GPUs)", None),
             kk.headline("CV MAE (folds 0-1 of 4 done, 2-3 next version)", None)]
    assert runfolders.headline_text(lines) == ("test PR-AUC 0.8123 vs MLP 0.17 (pass); scaling: not measurable here "
                                               "(needs two GPUs); CV MAE (folds 0-1 of 4 done, 2-3 next version)")


@pytest.mark.parametrize("notebook", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_smoke_run_never_shares_the_folder_of_the_defaults_run(notebook):
    """`make run NB=blend P=smoke=True` wrote into blend's defaults folder (the kit's run-control list, used
    where a notebook marks none, held smoke), over the full run's submission and metrics."""
    from kagglekit.run.params import run_control
    from kagglekit.tools.notebook_runner import declared_parameters, parameters_source
    defaults, control = declared_parameters(notebook), run_control(parameters_source(notebook))
    assert runfolders.folder_name(defaults, {"smoke": True}, control) != runfolders.folder_name(defaults, {}, control)


@pytest.mark.slow
def test_another_configuration_and_a_failed_run_leave_the_first_run_byte_equal(tmp_path):
    out = tmp_path / "runs"
    first = _run(out, "smoke=True")
    assert first.returncode == 0, first.stderr
    assert "validation accuracy 0." in first.stdout and "vs majority class 0." in first.stdout
    [good] = [p for p in (out / "quickstart").iterdir() if not p.is_symlink()]
    before = _snapshot(good)
    assert {"quickstart.ipynb", "metrics.json", "status.json"} <= {p.name for p in good.iterdir()}
    assert any("checkpoints" in str(k) for k in before)

    second = _run(out, "smoke=True", "lr=0.01")
    assert second.returncode == 0, second.stderr
    empty = tmp_path / "empty"  # a folder, but no table in it: the kernel fails on it
    empty.mkdir()
    failed = _run(out, "smoke=True", f"data_dir={empty}")
    assert failed.returncode == 1
    assert "FAILED: TableError: " in failed.stderr and "empty" in failed.stderr
    assert "Traceback" not in failed.stderr  # the traceback is in the run's error.log
    assert _snapshot(good) == before  # nothing of the first run was touched

    rows = {r["run"]: r for r in runfolders.listing(out)}
    assert len(rows) == 3
    assert rows[good.name]["status"] == "ok" and "validation accuracy" in rows[good.name]["headline"]
    [bad] = [r for r in rows.values() if r["run"].startswith("data_dir=")]
    assert bad["status"] == "failed" and not bad["latest"]
    assert "TableError" in (out / "quickstart" / bad["run"] / "error.log").read_text()
    latest = (out / "quickstart" / "latest").resolve()
    assert latest.name.startswith("lr=0.01,smoke=True-")  # the last run that succeeded
    listed = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "runs", "--output", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "failed" in listed.stdout and "validation accuracy" in listed.stdout


@pytest.mark.slow
def test_a_failed_rerun_of_a_good_configuration_keeps_its_executed_notebook(tmp_path):
    out = tmp_path / "runs"
    assert _run(out, "smoke=True").returncode == 0
    [folder] = [p for p in (out / "quickstart").iterdir() if not p.is_symlink()]
    notebook = (folder / "quickstart.ipynb").read_bytes()
    # The same configuration, made to fail by the machine: a card too old for the kit.
    again = _run(out, "smoke=True", env={"KAGGLEKIT_FAKE_GPUS": "Tesla P100:6.0:16"})
    assert again.returncode == 1
    assert (folder / "quickstart.ipynb").read_bytes() == notebook
    assert (folder / "quickstart.failed.ipynb").exists()
    status = json.loads((folder / "status.json").read_text())
    assert status["status"] == "failed" and "PrecisionError" in status["error"]
    assert _run(out, "smoke=True").returncode == 0  # good again: the failure is set aside, not left beside "ok"
    assert not {"error.log", "quickstart.failed.ipynb"} & {p.name for p in folder.iterdir()}
    [kept] = (folder / "failed-before").iterdir()
    assert "PrecisionError" in (kept / "error.log").read_text() and (kept / "quickstart.failed.ipynb").exists()


def test_make_runs_shows_kaggle_versions_beside_local_runs_with_cv_public_score_and_params(tmp_path):
    """Two local runs (make run) and two Kaggle versions (make output, one scored by make score),
    as those commands leave them: one table, every version with its status, CV headline, public
    score where scored and the parameters that differ from the notebook's defaults; also as CSV."""
    import csv
    import subprocess
    import sys
    runs = tmp_path / "runs"
    head = [{"result": "validation accuracy", "value": 0.91, "baseline": 0.5, "vs": "majority class",
             "passed": True}]
    for label, lr, t in (("defaults-aaaa1111", 3e-3, 100.0), ("lr=0.01-bbbb2222", 0.01, 200.0)):
        folder = runs / "quickstart" / label
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps({"status": "ok", "time": t}))
        (folder / "metrics.json").write_text(json.dumps({"config": {"lr": lr}, "summary": head, "wall_seconds": 9.0}))
    for version, status, t in ((3, "COMPLETE", 300.0), (4, "ERROR", 400.0)):
        folder = runs / "kaggle" / "kagglekit-quickstart" / f"v{version}"
        folder.mkdir(parents=True)
        summary = head if status == "COMPLETE" else []
        (folder / "metrics.json").write_text(json.dumps({"config": {"lr": 0.01, "epochs": 30}, "summary": summary}))
        (folder / "kaggle.json").write_text(json.dumps({"version": version, "status": status, "time": t}))
    (runs / "kaggle" / "kagglekit-quickstart" / "scores.json").write_text(json.dumps(
        {"3": {"public": "0.8912", "private": "", "status": "COMPLETE", "date": "2026-11-25"}}))
    done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "runs", "--output", str(runs)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(runs / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["kaggle v4", "kaggle v3", "lr=0.01-bbbb2222", "defaults-aaaa1111"]
    v4, v3 = rows[0], rows[1]
    assert (v3["status"], v3["public"], v4["status"], v4["public"]) == ("COMPLETE", "0.8912", "ERROR", "")
    assert v3["cv"] == "validation accuracy 0.91 vs majority class 0.5 (pass)" and v4["cv"] == ""
    assert v3["params"] == "lr=0.01" == rows[2]["params"]  # epochs: run control, not the experiment
    for text in ("kaggle v3", "0.8912", "ERROR", "lr=0.01", "runs.csv"):
        assert text in done.stdout, done.stdout
    header = done.stdout.splitlines()[0].split()
    assert header == ["latest", "notebook", "run", "status", "time", "wall_s", "public", "params", "cv"]

    long = [{"result": f"CV MAE (model {k}), mean of 5 folds (std 0.01)", "value": 0.4} for k in range(9)]
    (runs / "quickstart" / "defaults-aaaa1111" / "metrics.json").write_text(json.dumps({"summary": long}))
    wide = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "runs", "--output", str(runs)],
                          cwd=REPO, capture_output=True, text=True, timeout=300).stdout
    assert max(map(len, wide.splitlines())) < 220 and "model 0" in wide and "model 8" not in wide  # cut on screen
    with open(runs / "runs.csv") as f:
        assert "model 8" in [r for r in csv.DictReader(f) if r["run"] == "defaults-aaaa1111"][0]["cv"]  # whole


def test_make_run_of_several_notebooks_closes_with_their_verdicts_counted():
    from kagglekit.tools import cli
    judged = [cli._judged(s) for s in ([], [{"passed": None}], [{"passed": True}] * 2,
                                       [{"passed": True}, {"passed": False}, {"passed": None}])]
    assert judged == ["-", "-", "2 pass", "1 FAIL, 1 pass"]
    rows = [{"notebook": "tabular", "status": "ok", "headline": "x" * 900, "judged": "2 pass", "wall_s": 51.1,
             "folder": "runs/tabular/defaults-f54fe347"}]
    lines = cli._text_table(rows).splitlines()
    assert lines[0].split() == ["notebook", "status", "judged", "seconds", "folder"]
    assert lines[1].split() == ["tabular", "ok", "2", "pass", "51.1", "runs/tabular/defaults-f54fe347"]


@pytest.mark.slow
def test_a_run_sent_sigterm_says_killed_and_leaves_no_kernel(tmp_path):
    """`make run` stopped by SIGTERM (a closed terminal, a CI timeout): its status says killed,
    not running forever, and papermill shut its kernel down."""
    import signal
    import time

    import psutil
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "kagglekit.tools.cli", "run", "quickstart", "-p", "epochs=400",
                             "-p", "samples=4096", "--output", str(out)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not list(out.glob("quickstart/*/checkpoints/mlp/*/step-*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)  # training: the kernel is up and past kk.start
    kernels = [p for p in psutil.Process(proc.pid).children(recursive=True)]
    assert kernels, "no kernel started"
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "killed by SIGTERM" in stderr
    folder = next(p for p in (out / "quickstart").iterdir() if p.name != "latest")
    status = json.loads((folder / "status.json").read_text())
    assert status["status"] == "killed" and status["error"] == "killed by SIGTERM"
    assert runfolders.listing(out)[0]["status"] == "killed"
    gone = psutil.wait_procs(kernels, timeout=60)[1]
    assert not gone, f"left running: {gone}"


def test_a_notebooks_kernel_talks_over_its_own_unix_sockets_never_a_tcp_port(tmp_path, monkeypatch):
    """Kernels started side by side never race for a port (jupyter_client frees the TCP ports it picks
    before the kernel binds them: "ZMQError: Address already in use", papermill#511): the runner's kernel
    listens on socket files in a folder of its own. Four notebooks at once, each reading its transport."""
    import concurrent.futures
    import time

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from kagglekit.machine.signals import alive
    from kagglekit.tools.notebook_runner import run_notebook
    nb = new_notebook(cells=[new_code_cell("tag = ''", metadata={"tags": ["parameters"]}), new_code_cell(
        "import json, os, ipykernel\n"
        "info = ipykernel.get_connection_info(unpack=True)\n"
        "json.dump({'transport': info['transport'], 'ip': info['ip'], 'pid': os.getpid()}, open(f'{tag}.json', 'w'))")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "transport.ipynb")
    monkeypatch.chdir(tmp_path)  # the kernel's cwd is the caller's (each writes <tag>.json there)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda tag: run_notebook(tmp_path / "transport.ipynb", {"tag": tag}, output_dir=tmp_path / tag,
                                               progress=False), "abcd"))
    seen = [json.loads((tmp_path / f"{tag}.json").read_text()) for tag in "abcd"]
    assert {s["transport"] for s in seen} == {"ipc"}
    assert len({s["ip"] for s in seen}) == 4  # each kernel's sockets its own
    for _ in range(100):  # and each kernel shut down with its run (a kernel manager handed to papermill is not)
        if not [s["pid"] for s in seen if alive(s["pid"])]:
            break
        time.sleep(0.1)
    assert [s["pid"] for s in seen if alive(s["pid"])] == []
    assert not [p for s in seen for p in Path(s["ip"]).parent.glob("kernel-*")]  # the socket files went too


def test_a_running_status_whose_process_is_gone_shows_killed():
    import socket
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    here = {"status": "running", "pid": int(dead), "host": socket.gethostname()}
    assert runfolders.shown_status(here) == "killed"
    assert runfolders.shown_status({**here, "host": "another-machine"}) == "running"  # not ours to judge
    assert runfolders.shown_status({**here, "pid": os.getpid()}) == "running"
