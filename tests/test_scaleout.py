"""Past one Kaggle machine: training under torchrun on two "nodes" (loopback, c10d
rendezvous), and one Optuna study shared by several processes through PostgreSQL or a
journal file."""
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kagglekit import tune

JOBS = Path(__file__).parent / "jobs"
pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def rendezvous():
    """The c10d rendezvous store, hosted apart from both nodes: an agent that hosts it and
    finishes first would cut the other node's agent off while it still polls the store."""
    port = _port()
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    yield port
    del store


def _nodes(port: int, ckpt: Path, out: Path, *extra: str) -> list[tuple[subprocess.Popen, Path]]:
    """Two torchrun "nodes" of one process each, meeting through a c10d rendezvous;
    each with the file its output goes to."""
    nodes, run_id = [], f"kk-{out.stem}-{time.monotonic_ns()}"
    for i in range(2):
        log = out.with_name(f"{out.stem}-node{i}-{time.monotonic_ns()}.log")
        with open(log, "w") as sink:
            nodes.append((subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                 "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-conf=is_host=false",
                 f"--rdzv-id={run_id}",
                 str(JOBS / "torchrun_job.py"), "--ckpt", str(ckpt), "--out", str(out), *extra],
                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True), log))
    return nodes


def _kill_job(nodes, out: Path) -> None:
    """Every process of both nodes: the agents (each in its session) and the workers, which
    torchrun starts in sessions of their own (killing the agents alone leaves them training)."""
    for pid in [node.pid for node, _ in nodes] + [int(p.name) for p in Path(f"{out}.pids").glob("*")]:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for node, _ in nodes:
        node.wait()


def _finish(nodes, out: Path) -> None:
    deadline = time.monotonic() + 300
    for node, log in nodes:
        try:
            node.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_job(nodes, out)
            pytest.fail("the torchrun job did not finish in 300 s:\n" + "\n".join(
                f"--- {lg.name}\n{lg.read_text()[-2000:]}" for _, lg in nodes))
        assert node.returncode == 0, log.read_text()[-3000:]


def _weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def test_two_torchrun_nodes_train_like_one_process_on_the_global_batch_and_resume_after_a_kill(
        tmp_path, rendezvous):
    _finish(_nodes(rendezvous, tmp_path / "ckpt2", tmp_path / "two.pt"), tmp_path / "two.pt")
    single = subprocess.run([sys.executable, str(JOBS / "torchrun_job.py"), "--ckpt",
                             str(tmp_path / "ckpt1"), "--out", str(tmp_path / "one.pt"), "--batch", "32"],
                            capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr
    two, one = _weights(tmp_path / "two.pt"), _weights(tmp_path / "one.pt")
    assert two["world"] == 2 and one["world"] == 1
    for k in one["model"]:
        torch.testing.assert_close(two["model"][k], one["model"][k], rtol=1e-5, atol=1e-6)

    # Under DDP the ranks decide to save every 16 steps: killed after step 20, the job has
    # step 16 saved and must go on from there.
    nodes = _nodes(rendezvous, tmp_path / "ckpt3", tmp_path / "killed.pt", "--sleep", "0.2")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any("step 20" in log.read_text() for _, log in nodes):
        time.sleep(0.05)
    _kill_job(nodes, tmp_path / "killed.pt")
    assert any("step 20" in log.read_text() for _, log in nodes)
    time.sleep(3)  # what a surviving worker would still write (before: the workers trained on)
    assert not (tmp_path / "killed.pt").exists()  # killed before the end
    _finish(_nodes(rendezvous, tmp_path / "ckpt3", tmp_path / "killed.pt"), tmp_path / "killed.pt")
    resumed = _weights(tmp_path / "killed.pt")
    assert resumed["resumed_from"] and resumed["resumed_from"].endswith("/step-00000016.pt")
    for k in two["model"]:
        assert torch.equal(resumed["model"][k], two["model"][k]), k


def _worker(storage: str, n: int, sleep: float, out: Path, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(JOBS / "shared_study_job.py"), storage, str(n),
                             str(sleep), str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **(env or {})})


def _shared_study_checks(storage: str, tmp_path: Path, env=None) -> str:
    """Three workers reach exactly 9 trials; a killed worker's trial is retried."""
    workers = [_worker(storage, 9, 0.2, tmp_path / f"w{i}", env) for i in range(3)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs
    victim = _worker(storage, 11, 30.0, tmp_path / "victim", env)  # a long trial, then killed
    for line in victim.stdout:
        if line.startswith("trial 9 started"):
            victim.send_signal(signal.SIGKILL)
            break
    victim.wait()
    time.sleep(3)  # past the grace period: the trial's heartbeat is stale
    last = _worker(storage, 11, 0.05, tmp_path / "last", env)
    outputs.append(last.communicate(timeout=300)[0])
    assert last.returncode == 0, outputs[-1]
    return "\n".join(outputs)


def _check_study(study) -> None:
    counts = tune.counts(study)
    assert counts == {"COMPLETE": 11, "FAIL": 1}, counts
    killed = study.trials[9]
    [retry] = [t for t in study.trials if t.system_attrs.get("failed_trial") == 9]
    assert killed.state.name == "FAIL" and retry.params == killed.params and retry.state.name == "COMPLETE"


def test_a_journal_study_on_a_shared_folder_is_shared_exactly(tmp_path):
    storage = f"journal:{tmp_path / 'shared' / 'study.log'}"
    (tmp_path / "shared").mkdir()
    _shared_study_checks(storage, tmp_path)
    _check_study(tune.load_study("shared", storage, "maximize"))


def _postgres_binaries() -> Path | None:
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


@pytest.fixture
def postgres(tmp_path):
    """A real PostgreSQL server on loopback, run as the `postgres` user (it refuses root)."""
    binaries = _postgres_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries (Debian's postgresql package) on this machine")
    try:
        import psycopg2  # noqa: F401
        user = pwd.getpwnam("postgres")
    except (ImportError, KeyError) as err:
        pytest.skip(f"cannot run PostgreSQL here: {err}")
    import tempfile
    home = Path(tempfile.mkdtemp(prefix="kk-pg-"))  # pytest's folders are closed to other users
    home.chmod(0o755)
    data, port, password = home / "data", _port(), "s3cret-Pw-4-kk"
    data.mkdir()
    os.chown(data, user.pw_uid, user.pw_gid)
    pwfile = home / "pw"
    pwfile.write_text(password)
    os.chown(pwfile, user.pw_uid, user.pw_gid)
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_pg, str(binaries / "initdb"), "-D", str(data), "-U", "kk", "--auth=md5",
                    f"--pwfile={pwfile}"], check=True, capture_output=True)
    subprocess.run([*as_pg, str(binaries / "pg_ctl"), "-D", str(data), "-w", "-l", str(data / "log"),
                    "-o", f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg2://kk:{password}@127.0.0.1:{port}/postgres", password
    finally:
        subprocess.run([*as_pg, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def test_a_postgresql_study_is_shared_exactly_and_its_password_appears_nowhere(tmp_path, postgres):
    url, password = postgres
    env = {"KK_STUDY_DB": url}  # as a Kaggle secret or an environment variable would hold it
    output = _shared_study_checks("env:KK_STUDY_DB", tmp_path, env)
    _check_study(tune.load_study("shared", url, "maximize"))
    assert password not in output
    for path in tmp_path.rglob("*"):  # every report, CSV, plot and study file the workers wrote
        if path.is_file():
            assert password not in path.read_text(errors="ignore"), path
