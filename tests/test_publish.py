"""The Kaggle pipeline: metadata validation, build, and the real `kaggle` CLI talking to
a loopback server of ours (tests/kaggle_server.py)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kagglekit.tools.publish import metadata
from kagglekit.tools.publish.metadata import MetadataError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from kaggle_server import FakeKaggle  # noqa: E402

GOOD = json.loads((REPO / "kernel-metadata" / "quickstart.json").read_text())


@pytest.fixture(autouse=True)
def build_in_tmp(tmp_path, monkeypatch):
    """Builds go to a temporary folder: the tests never write into the checkout."""
    monkeypatch.setenv("KAGGLEKIT_BUILD", str(tmp_path / "build"))
    return tmp_path / "build"


def _clean_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KAGGLE", "KAGGLEKIT")) and k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    return {**env, "KAGGLEKIT_BUILD": os.environ["KAGGLEKIT_BUILD"], **extra}


def _cli(*args, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("notebook", sorted(p.stem for p in (REPO / "kernel-metadata").glob("*.json")))
def test_every_notebook_has_valid_metadata(notebook):
    meta = metadata.load(REPO / "kernel-metadata" / f"{notebook}.json", REPO / "notebooks")
    assert meta["machine_shape"] == "NvidiaTeslaT4" and meta["enable_internet"] is False


@pytest.mark.parametrize("change, field, fix", [
    ({"slug": "abc"}, "slug", "5-50 lower-case"),
    ({"slug": "tester/kagglekit-quickstart"}, "slug", "without owner"),
    ({"title": "abc"}, "title", "at least 5"),
    ({"title": "Something Else"}, "title", "slugifies to 'something-else'"),
    ({"notebook": "nope"}, "notebook", "does not exist"),
    ({"is_private": "true"}, "is_private", "explicitly"),
    ({"enable_internet": None}, "enable_internet", "defaults enable_internet to TRUE"),
    ({"machine_shape": "NvidiaTeslaP100"}, "machine_shape", "retired"),
    ({"machine_shape": "T4"}, "machine_shape", "not a current shape"),
    ({"dataset_sources": ["just-a-slug"]}, "dataset_sources", "owner/dataset-slug"),
    ({"kernel_sources": "me/k"}, "kernel_sources", "must be a list"),
    ({"competition_sources": ["Bad Name"]}, "competition_sources", "competition-slug"),
    ({"model_sources": ["me/model/pytorch/default"]}, "model_sources", "owner/model/framework"),
    ({"enable_gpu": True}, "enable_gpu", "unknown field"),
])
def test_each_metadata_rule_names_the_file_field_and_fix(tmp_path, change, field, fix):
    path = tmp_path / "quickstart.json"
    with pytest.raises(MetadataError) as err:
        metadata.validate({**GOOD, **change}, path, REPO / "notebooks")
    assert f"{path}: {field}:" in str(err.value) and fix in str(err.value)


def test_missing_credentials_fail_before_any_work(tmp_path):
    env = _clean_env({"HOME": str(tmp_path), "KAGGLE_CONFIG_DIR": str(tmp_path / "none")})
    done = _cli("push", "quickstart", env=env)
    assert done.returncode == 2 and "no Kaggle credentials" in done.stderr
    assert "chmod 600" in done.stderr


@pytest.mark.slow
def test_push_sends_t4x2_no_internet_sources_and_the_embedded_notebook(tmp_path):
    with FakeKaggle() as kaggle:
        env = _clean_env(kaggle.env(tmp_path))
        done = _cli("push", "quickstart", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "version 1 -> http://localhost/code/" in done.stdout
        sent = kaggle.pushed()[0]
    assert sent["slug"] == "tester/kagglekit-quickstart"
    assert sent["machineShape"] == "NvidiaTeslaT4" and not sent.get("enableInternet")
    assert sent["kernelDataSources"] == ["tester/kagglekit-quickstart"]  # the resume chain
    nb = json.loads(sent["text"])
    assert nb["cells"][0]["source"].startswith("# kagglekit: embedded wheel kagglekit-")
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert "epochs = 20" in injected[0]["source"]  # the Kaggle parameters, rendered in
    assert "papermill" not in nb["metadata"] and str(REPO) not in sent["text"]
    assert kaggle.key not in sent["text"]  # credentials never travel in the notebook
    built = Path(os.environ["KAGGLEKIT_BUILD"]) / "kagglekit-quickstart"
    assert all(kaggle.key not in p.read_text() for p in built.iterdir())
    assert not (REPO / "build").exists() or "kagglekit-quickstart" not in os.listdir(REPO / "build")


def test_a_local_build_needs_no_credentials(tmp_path):
    env = _clean_env({"HOME": str(tmp_path), "KAGGLE_CONFIG_DIR": str(tmp_path / "none")})
    done = _cli("build", "quickstart", env=env)
    assert done.returncode == 0, done.stderr
    meta = json.loads((Path(env["KAGGLEKIT_BUILD"]) / "kagglekit-quickstart" /
                       "kernel-metadata.json").read_text())
    assert meta["id"] == "your-kaggle-username/kagglekit-quickstart"
    assert "placeholder" in done.stderr


@pytest.mark.slow
def test_a_server_side_refusal_makes_push_fail_with_its_message(tmp_path):
    with FakeKaggle() as kaggle:
        kaggle.push_error = "Notebook quota exceeded"
        done = subprocess.run(["make", "-s", "push", "NB=quickstart"], cwd=REPO, capture_output=True,
                              text=True, env=_clean_env(kaggle.env(tmp_path)), timeout=600)
    assert done.returncode != 0
    assert "Kaggle refused the push" in done.stderr and "Notebook quota exceeded" in done.stderr


def test_status_error_fails_and_complete_passes(tmp_path):
    with FakeKaggle() as kaggle:
        env = _clean_env(kaggle.env(tmp_path))
        assert _cli("status", "quickstart", env=env).returncode == 0
        kaggle.status, kaggle.failure = "ERROR", "CUDA error: out of memory"
        done = _cli("status", "quickstart", env=env)
    assert done.returncode == 1
    assert "ERROR" in done.stdout and "CUDA error: out of memory" in done.stdout


def test_output_download_keeps_subfolders(tmp_path):
    with FakeKaggle() as kaggle:
        kaggle.files = {"metrics.json": b'{"fit": {}}', "checkpoints/mlp/step-00000010.json": b"{}",
                        "learning_curves.png": b"\x89PNG"}
        out = tmp_path / "runs"
        done = _cli("output", "quickstart", "--output", str(out), env=_clean_env(kaggle.env(tmp_path)))
        assert done.returncode == 0, done.stdout + done.stderr
    dest = out / "kagglekit-quickstart"
    got = sorted(str(p.relative_to(next(dest.iterdir()))) for p in dest.rglob("*") if p.is_file())
    assert "checkpoints/mlp/step-00000010.json" in got and "metrics.json" in got
    assert "kagglekit-quickstart.log" in got


def test_a_world_readable_kaggle_json_is_warned_about(tmp_path, monkeypatch):
    from kagglekit.tools.publish import credentials
    folder = tmp_path / ".kaggle"
    folder.mkdir()
    (folder / "kaggle.json").write_text('{"username": "me", "key": "k" }')
    (folder / "kaggle.json").chmod(0o644)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(folder))
    with pytest.warns(UserWarning, match="readable by other users.*chmod 600"):
        assert credentials.username() == "me"


def _sandbox(root: Path, inputs_from: Path | None = None) -> Path:
    """A Kaggle-like tree: read-only input/ (optionally holding a previous output)."""
    import shutil
    (root / "working").mkdir(parents=True)
    (root / "input").mkdir()
    if inputs_from is not None:
        shutil.copytree(inputs_from, root / "input" / "notebooks" / "tester" / "kagglekit-quickstart")
    for path in [root / "input", *(root / "input").rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return root


def _run_in_sandbox(notebook: Path, root: Path, kernels: Path, monkeypatch, tmp: Path) -> dict:
    import papermill
    for name, value in {"KAGGLEKIT_ROOT": str(root), "KAGGLE_KERNEL_RUN_TYPE": "Batch",
                        "KAGGLEKIT_ALLOW_NO_GPU": "1",  # a CPU sandbox of a T4 x2 kernel
                        "TMPDIR": str(tmp),  # the install cell's folder: ours to remove
                        "JUPYTER_PATH": str(kernels), "PIP_NO_INDEX": "1",
                        "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(name, value)  # the kernel inherits them; no network is reachable
    papermill.execute_notebook(str(notebook), str(root / "working" / notebook.name),
                               kernel_name="python3", cwd=str(root / "working"), progress_bar=False)
    return json.loads((root / "working" / "metrics.json").read_text())


@pytest.mark.slow
def test_the_pushed_notebook_runs_in_a_kaggle_like_sandbox_and_resumes_from_its_output(
        tmp_path, monkeypatch):
    from kagglekit.tools.publish.build import build
    with FakeKaggle() as kaggle:
        for k, v in kaggle.env(tmp_path / "home").items():
            monkeypatch.setenv(k, v)
        monkeypatch.chdir(REPO)
        built = build("quickstart", out_root=tmp_path / "build", overrides={"smoke": True})
    notebook = built / "kagglekit-quickstart.ipynb"
    kernels = tmp_path / "kernels"
    (kernels / "kernels" / "python3").mkdir(parents=True)
    (kernels / "kernels" / "python3" / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(REPO / "tests" / "jobs" / "sandbox_kernel.py"), "-f",
                 "{connection_file}"], "display_name": "sandbox", "language": "python"}))
    # The kernel's temporary folder: short, as /tmp is on Kaggle (AF_UNIX socket paths,
    # which DataLoader workers pass tensors through, stop at 108 bytes), and removed after.
    tmp = Path(tempfile.mkdtemp(prefix="kks-"))
    try:
        _check_the_chain(notebook, tmp_path, kernels, monkeypatch, tmp)
    finally:
        shutil.rmtree(tmp)


def _check_the_chain(notebook, tmp_path, kernels, monkeypatch, tmp):
    first = _run_in_sandbox(notebook, _sandbox(tmp_path / "v1"), kernels, monkeypatch, tmp)
    assert first["env"]["kagglekit_path"].startswith(str(tmp / "kagglekit-"))  # the embedded wheel ran
    assert first["env"]["where"] == "kaggle (Batch) [simulated]"
    assert first["fit"]["stopped"] == "completed" and first["fit"]["resumed_from"] is None
    assert first["accelerator"] == {"expected": "2 x T4", "found": [], "ok": False}  # CPU sandbox
    second = _run_in_sandbox(notebook, _sandbox(tmp_path / "v2", inputs_from=tmp_path / "v1" / "working"),
                             kernels, monkeypatch, tmp)
    assert second["fit"]["stopped"] == "already_complete"
    assert "/input/notebooks/tester/kagglekit-quickstart/checkpoints/mlp/" in second["fit"]["resumed_from"]


def test_compare_flags_a_score_that_moved_over_ten_percent_and_an_oom():
    from kagglekit.tools.publish import comparison as report
    done = [{"result": "test Dice", "value": 0.8}]  # a summary: the run reached its last cell
    local = {"fit": {"val_loss": 0.50, "oom_count": 0, "stopped": "completed"}, "test_dice": 0.80,
             "wall_seconds": 100.0, "config": {"lr": 0.1}, "summary": done}
    close = {"fit": {"val_loss": 0.505, "oom_count": 0, "stopped": "completed"}, "test_dice": 0.79,
             "wall_seconds": 40.0, "summary": done, "accelerator": {"ok": True}}
    ok = report.compare(local, close)
    assert ok["ok"] and {r["metric"]: r["verdict"] for r in ok["rows"]} == \
        {"fit.val_loss": "fine", "test_dice": "fine"}
    assert ok["checks"]["GPU utilisation above 70%"] is None  # not measured: said so, not passed
    bad = report.compare(local, {"fit": {"val_loss": 0.60, "oom_count": 2, "stopped": "time_budget"},
                                 "test_dice": 0.70})
    assert not bad["ok"]
    assert bad["checks"] == {"a score is shared": True, "scores within 10%": False,
                             "both runs finished": False, "finished within the time budget": False,
                             "no out-of-memory": False, "Kaggle gave the GPUs asked for": None,
                             "GPU utilisation above 70%": None}
    text = report.markdown(bad, "demo")
    assert "| fit.val_loss | 0.5 | 0.6 | +20.0% | FAIL |" in text and "Overall: FAILED" in text


def test_make_compare_writes_the_report_next_to_the_kaggle_run(tmp_path):
    runs = tmp_path / "runs"
    (runs / "quickstart" / "defaults-1").mkdir(parents=True)
    (runs / "quickstart" / "defaults-1" / "metrics.json").write_text(json.dumps({"fit": {"val_loss": 0.5}}))
    kaggle_run = runs / "kaggle" / "kagglekit-quickstart" / "v3"
    kaggle_run.mkdir(parents=True)
    (kaggle_run / "metrics.json").write_text(json.dumps({"fit": {"val_loss": 0.7}}))
    done = _cli("compare", "quickstart", "--runs", str(runs), env=_clean_env({}))
    assert done.returncode == 1 and "FAIL" in done.stdout
    assert (kaggle_run / "compare.md").exists() and (kaggle_run / "compare.png").exists()
