"""The Kaggle round trip a user lives in, with the real kaggle CLI against tests/kaggle_server.py:
first push, status and logs, output, pull, quota, a like-for-like compare, tokens."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from kaggle_server import FakeKaggle  # noqa: E402

KERNEL = "tester/kagglekit-quickstart"


@pytest.fixture(autouse=True)
def build_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_BUILD", str(tmp_path / "build"))


def _env(kaggle, home: Path, token: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAGGLE", "KAGGLEKIT"))
           and k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    return {**env, "KAGGLEKIT_BUILD": os.environ["KAGGLEKIT_BUILD"], **kaggle.env(home, token=token)}


def _cli(*args, env: dict, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_first_push_whose_self_source_is_not_valid_yet_records_its_version(tmp_path):
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path)
        first = _cli("push", "quickstart", env=env)
        assert first.returncode == 0, first.stderr
        assert "its own output is not attached yet" in first.stderr
        pushed = json.loads((Path(env["KAGGLEKIT_BUILD"]) / "kagglekit-quickstart" / "pushed.json").read_text())
        assert pushed["version"] == 1 and pushed["problems"] == []
        second = _cli("push", "quickstart", env=env)  # the kernel exists now: attached, no warning
        assert second.returncode == 0 and "not attached" not in second.stderr
        assert "version 2" in second.stdout
        assert "its first version's image kept (docker_image_pinning_type: original)" in second.stdout


@pytest.mark.slow
def test_pushing_goes_on_past_a_failure_and_pushing_all_needs_all(tmp_path):
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path)
        refused = _cli("push", env=env)
        assert refused.returncode == 2 and "ALL=1" in refused.stderr and not kaggle.pushed()
        kaggle.refuse = {"tester/kagglekit-gpu-utilization"}
        both = _cli("push", "gpu_utilization", "quickstart", env=env)
        assert both.returncode == 1
        assert "gpu_utilization: push FAILED" in both.stderr
        assert "quickstart: pushed (version 1" in both.stdout  # the second went on
        bad = _cli("push", "quickstart", "--accelerator", "NvidiaTeslaP100", env=env)
        assert bad.returncode == 2 and "retired" in bad.stderr
        stand_in = _cli("push", "timeseries_served", env=env)  # the sandbox's competition exists nowhere else
        assert stand_in.returncode == 2 and "stand-in of an inference-server competition" in stand_in.stderr
    # The refused one was sent, the other went on; the P100 and the stand-in ones never reached the server.
    assert [b["slug"] for b in kaggle.pushed()] == ["tester/kagglekit-gpu-utilization", KERNEL]


@pytest.mark.slow
def test_pushing_six_kernels_runs_at_most_two_sessions_and_pushes_the_rest_as_sessions_end(tmp_path):
    """Kaggle runs about two GPU batch sessions per account at a time: six pushes, each session
    RUNNING for three status polls, never more than two at once, all six pushed in the end."""
    six = ["blend", "gpu_utilization", "quickstart", "segmentation_3d", "sequence_models",
           "timeseries_forecast"]
    with FakeKaggle() as kaggle:
        kaggle.session_polls = 3
        env = {**_env(kaggle, tmp_path), "KAGGLEKIT_QUEUE_POLL_S": "0"}
        done = _cli("push", *six, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(kaggle.pushed()) == 6 and kaggle.max_running == 2
    assert "queue: running blend, gpu_utilization; waiting: quickstart, segmentation_3d" in done.stdout
    assert "blend: COMPLETE: its session ended" in done.stdout


def test_output_is_refused_while_running_and_filed_under_the_servers_version(tmp_path):
    with FakeKaggle() as kaggle:
        kaggle.kernels[KERNEL] = {"text": "{}", "newTitle": "t", "language": "python",
                                  "kernelType": "notebook"}
        kaggle.versions = 7
        kaggle.files = {"metrics.json": b"{}", "checkpoints/mlp/step-00000010.json": b"{}"}
        env = _env(kaggle, tmp_path)
        out = tmp_path / "runs"
        kaggle.status = "RUNNING"
        busy = _cli("output", "quickstart", "--output", str(out), env=env)
        assert busy.returncode == 1 and "is RUNNING" in busy.stderr and not out.exists()
        kaggle.status = "COMPLETE"
        done = _cli("output", "quickstart", "--output", str(out), env=env)
        assert done.returncode == 0, done.stderr
    assert (out / "kagglekit-quickstart" / "v7" / "checkpoints" / "mlp" / "step-00000010.json").exists()


def test_after_an_error_status_shows_the_logs_tail_and_logs_the_whole(tmp_path):
    with FakeKaggle() as kaggle:
        kaggle.status, kaggle.failure = "ERROR", "Your notebook tried to allocate more memory"
        kaggle.log = [{"stream_name": "stdout", "time": 1.0, "data": "epoch 1\n"},
                      {"stream_name": "stderr", "time": 2.0,
                       "data": "Traceback (most recent call last):\nValueError: bad shard\n"}]
        env = _env(kaggle, tmp_path)
        status = _cli("status", "quickstart", env=env)
        logs = _cli("logs", "quickstart", env=env)
    assert status.returncode == 1 and "ERROR" in status.stdout
    assert "ValueError: bad shard" in status.stdout and "make logs NB=quickstart" in status.stdout
    assert logs.returncode == 0 and "epoch 1" in logs.stdout and "ValueError: bad shard" in logs.stdout


def _repo_copy(root: Path) -> Path:
    """notebooks/ and kernel-metadata/ in a git repository of their own (commit made)."""
    for folder in ("notebooks", "kernel-metadata"):
        shutil.copytree(REPO / folder, root / folder)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)
    return root


@pytest.mark.slow
def test_pull_brings_back_a_server_side_edit_stripped_and_merges_the_metadata(tmp_path):
    repo = _repo_copy(tmp_path / "repo")
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path / "home")
        assert _cli("push", "quickstart", env=env).returncode == 0

        def edit(nb):
            cell = next(c for c in nb["cells"] if "run = kk.start(" in "".join(c["source"]))
            cell["source"] = "".join(cell["source"]) + "\n# tuned on Kaggle"
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
        kaggle.edit_on_server(KERNEL, edit)
        kaggle.kernels[KERNEL]["datasetDataSources"] = ["dataset/someone/some-data"]
        pulled = _cli("pull", "quickstart", env=env, cwd=repo)
        assert pulled.returncode == 0, pulled.stderr
        nb = json.loads((repo / "notebooks" / "quickstart.ipynb").read_text())
        meta = json.loads((repo / "kernel-metadata" / "quickstart.json").read_text())
        assert "1 cell(s) changed, 0 added, 0 removed" in pulled.stdout
        assert "dataset_sources: [] -> ['someone/some-data']" in pulled.stdout
        sources = ["".join(c["source"]) for c in nb["cells"]]
        assert any("# tuned on Kaggle" in s for s in sources)
        assert not any(s.startswith("# kagglekit: embedded wheel") for s in sources)
        tags = [t for c in nb["cells"] for t in c["metadata"].get("tags", [])]
        assert "injected-parameters" not in tags and "kagglekit" not in nb["metadata"]
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
        assert meta["dataset_sources"] == ["someone/some-data"] and meta["kernel_sources"] == []
        assert meta["parameters"]["epochs"] == 20  # the kit's own fields kept
        # An uncommitted local edit is never overwritten.
        (repo / "notebooks" / "quickstart.ipynb").write_text(json.dumps(nb) + " ")
        again = _cli("pull", "quickstart", env=env, cwd=repo)
    assert again.returncode == 2 and "uncommitted changes" in again.stderr
    assert (repo / "notebooks" / "quickstart.ipynb").read_text().endswith(" ")


def test_quota_shows_the_gpu_hours_used_and_left(tmp_path):
    with FakeKaggle() as kaggle:
        done = _cli("quota", env=_env(kaggle, tmp_path))
    assert done.returncode == 0 and "GPU" in done.stdout
    assert "11.50h" in done.stdout and "18.50h" in done.stdout and "30.00h" in done.stdout


@pytest.mark.slow
def test_an_access_token_is_accepted_and_never_written_to_an_artefact(tmp_path):
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path, token=True)  # ~/.kaggle/access_token only
        done = _cli("push", "quickstart", env=env)
        assert done.returncode == 0, done.stderr
        sent = kaggle.pushed()[0]
        assert sent["slug"] == KERNEL  # the user the token belongs to, asked of the server
        assert kaggle.token not in sent["text"]
        built = Path(env["KAGGLEKIT_BUILD"])
        assert all(kaggle.token not in p.read_text(errors="ignore") for p in built.rglob("*")
                   if p.is_file() and p.suffix != ".whl")
        assert kaggle.token not in done.stdout + done.stderr


def _metrics(folder: Path, **values) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(values))


def test_compare_refuses_other_configs_and_fails_without_scores_or_gpus(tmp_path):
    runs, env = tmp_path / "runs", {**os.environ, "KAGGLEKIT_BUILD": os.environ["KAGGLEKIT_BUILD"]}
    kaggle_run = runs / "kaggle" / "kagglekit-quickstart" / "v3"
    done = [{"result": "validation accuracy", "value": 0.8}]
    _metrics(runs / "quickstart" / "defaults-1", config={"epochs": 8, "lr": 0.003}, summary=done,
             fit={"val_acc": 0.80})
    _metrics(kaggle_run, config={"epochs": 20, "lr": 0.003}, summary=done, fit={"val_acc": 0.81},
             accelerator={"ok": True})
    refused = _cli("compare", "quickstart", "--runs", str(runs), env=env)
    assert refused.returncode == 1 and "refused" in refused.stderr and "epochs: 8 -> 20" in refused.stderr
    _metrics(runs / "quickstart" / "epochs=20-2", config={"epochs": 20, "lr": 0.003}, summary=done,
             fit={"val_acc": 0.80})
    same = _cli("compare", "quickstart", "--runs", str(runs), env=env)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "| fit.val_acc | 0.8 | 0.81 | +1.3% | fine |" in same.stdout
    assert "| difference from the local run | success | 0.0% (0.8 local, 0.8 Kaggle" in same.stdout
    (kaggle_run / "metrics.json").write_text(json.dumps(
        {"config": {"epochs": 20, "lr": 0.003}, "summary": done, "fit": {"val_acc": 0.81},
         "accelerator": {"ok": False, "found": ["Tesla P100-PCIE-16GB"]}}))
    wrong_gpu = _cli("compare", "quickstart", "--runs", str(runs), env=env)
    assert wrong_gpu.returncode == 1 and "| GPUs | **FAIL** | Kaggle gave ['Tesla P100-PCIE-16GB']" in wrong_gpu.stdout
    (kaggle_run / "metrics.json").write_text(json.dumps(  # crashed after kk.start: no scores
        {"config": {"epochs": 20, "lr": 0.003}, "accelerator": {"ok": True}}))
    crashed = _cli("compare", "quickstart", "--runs", str(runs), env=env)
    assert crashed.returncode == 1 and "| ran to the end | **FAIL** | no summary" in crashed.stdout


def test_the_wheel_holds_what_git_knows_never_a_stale_module(tmp_path, monkeypatch):
    from kagglekit.tools.publish.build import build_wheel
    repo = tmp_path / "repo"
    for item in ("kagglekit", "pyproject.toml", "README.md"):
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, repo / item)
    shutil.rmtree(repo / "kagglekit" / "__pycache__", ignore_errors=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("build/\n__pycache__/\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)
    (repo / "build" / "lib" / "kagglekit").mkdir(parents=True)  # an earlier in-tree build
    (repo / "build" / "lib" / "kagglekit" / "ghost.py").write_text("x = 1\n")
    (repo / "kagglekit" / "stale.py").write_text("x = 1\n")  # new, not committed
    monkeypatch.chdir(repo)
    import zipfile

    def names(wheel):
        return {n.split("/", 1)[1] for n in zipfile.ZipFile(wheel).namelist() if n.startswith("kagglekit/")}

    wheel, untracked = build_wheel(tmp_path / "w1")
    assert "stale.py" in names(wheel) and untracked  # packed, and the build says dirty
    assert "ghost.py" not in names(wheel)
    (repo / "kagglekit" / "stale.py").unlink()  # removed from the tree...
    wheel, untracked = build_wheel(tmp_path / "w2")
    assert "stale.py" not in names(wheel) and not untracked  # ...absent from the next wheel
    assert "loop/train.py" in names(wheel)
    # The tooling (push, sandbox, CLI) never runs in a kernel: it is not embedded.
    assert not [n for n in names(wheel) if n.startswith("tools/")]


def test_metadata_takes_what_the_cli_takes_and_the_install_cell_hides_on_kaggle(tmp_path):
    from kagglekit.tools.publish import build, metadata
    meta = json.loads((REPO / "kernel-metadata" / "quickstart.json").read_text())
    meta.update(docker_image_pinning_type="latest", enable_tpu=False,
                dataset_sources=["someone/some-data/3"], kernel_sources=["someone/other-kernel/12"])
    metadata.validate(meta, tmp_path / "quickstart.json", REPO / "notebooks")
    out = metadata.kaggle_metadata(meta, "me", "k.ipynb")
    assert out["docker_image_pinning_type"] == "latest" and out["enable_tpu"] is False
    with pytest.raises(metadata.MetadataError, match="docker_image_pinning_type"):
        metadata.validate({**meta, "docker_image_pinning_type": "newest"}, tmp_path / "q.json",
                          REPO / "notebooks")
    wheel = tmp_path / "kagglekit-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    cell = build.install_cell(wheel, {"commit": "abc", "dirty": False})
    assert cell["metadata"]["_kg_hide-input"] is True


def _masks_zip(shapes: dict) -> bytes:
    import io
    import zipfile

    import numpy as np
    import tifffile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for vid, (shape, dtype) in shapes.items():
            mask = io.BytesIO()
            tifffile.imwrite(mask, np.zeros(shape, dtype=dtype), photometric="minisblack")
            zf.writestr(f"{vid}.tif", mask.getvalue())
    return buf.getvalue()


def test_submit_sends_a_finished_versions_valid_zip_and_refuses_anything_else(tmp_path):
    kernel = "tester/kagglekit-segmentation-3d"
    comp = json.loads((REPO / "kernel-metadata" / "segmentation_3d.json").read_text())["competition_sources"]
    assert comp == ["vesuvius-challenge-surface-detection"]
    metrics = json.dumps({"submission": {"test_ids": ["a1", "b2"]}, "chain": {"fit": "skipped"}}).encode()
    good = _masks_zip({"a1": ((4, 5, 6), "uint8"), "b2": ((6, 5, 4), "uint8")})
    with FakeKaggle() as kaggle:
        kaggle.kernels[kernel] = {"text": "{}", "newTitle": "t", "language": "python",
                                  "kernelType": "notebook", "competitionDataSources": comp}
        kaggle.versions = 5
        env = _env(kaggle, tmp_path)
        out = str(tmp_path / "runs")
        submits = lambda: [b for p, b in kaggle.requests if p.endswith("/CreateCodeSubmission")]  # noqa: E731
        kaggle.status = "RUNNING"
        busy = _cli("submit", "segmentation_3d", "--output", out, env=env)
        assert busy.returncode == 1 and "is RUNNING, not COMPLETE" in busy.stderr
        kaggle.status = "COMPLETE"
        kaggle.files = {"metrics.json": metrics}
        no_zip = _cli("submit", "segmentation_3d", "--output", out, env=env)
        assert no_zip.returncode == 1 and "no submission.zip" in no_zip.stderr
        kaggle.files["submission.zip"] = _masks_zip({"a1": ((4, 5, 6), "uint8"), "b2": ((6, 5, 4), "float32")})
        bad = _cli("submit", "segmentation_3d", "--output", out, env=env)
        assert bad.returncode == 1 and "b2.tif is float32" in bad.stderr
        kaggle.files["submission.zip"] = _masks_zip({"a1": ((4, 5, 6), "uint8")})
        missing = _cli("submit", "segmentation_3d", "--output", out, env=env)
        assert missing.returncode == 1 and "no mask for test id b2" in missing.stderr
        kaggle.files["submission.zip"] = good
        kaggle.files["metrics.json"] = json.dumps({"submission": {"test_ids": ["a1", "b2"]},
                                                   "chain": {"fit": "trained"}}).encode()
        trained = _cli("submit", "segmentation_3d", "--output", out, env=env)
        assert trained.returncode == 1 and "would train again" in trained.stderr
        assert submits() == []  # nothing reached the competition so far
        kaggle.files["metrics.json"] = metrics
        ok = _cli("submit", "segmentation_3d", "--output", out, "-m", "v5 flips=3", env=env)
        assert ok.returncode == 0, ok.stderr
        assert "submitted version 5" in ok.stdout
        assert submits() == [{"competitionName": comp[0], "kernelOwner": "tester",
                              "kernelSlug": "kagglekit-segmentation-3d", "kernelVersion": 5,
                              "fileName": "submission.zip",
                              "submissionDescription": "kagglekit-segmentation-3d v5: v5 flips=3"}]
        kaggle.score(kaggle.submissions[0]["ref"], "0.4821")
        scored = _cli("score", "segmentation_3d", "--output", out, env=env)
        assert scored.returncode == 0, scored.stderr
        assert "COMPLETE" in scored.stdout and "0.4821" in scored.stdout and "v5 flips=3" in scored.stdout
        kept = json.loads((Path(out) / "kagglekit-segmentation-3d" / "scores.json").read_text())
        assert kept["5"]["public"] == "0.4821"  # what make runs shows beside version 5
        not_comp = _cli("submit", "quickstart", "--output", out, env=env)
        assert not_comp.returncode == 2 and "no competition_sources" in not_comp.stderr


def test_a_file_competition_uploads_the_checked_csv_and_score_reads_it_back(tmp_path):
    """Store Sales: the version's submission.csv is checked against the sample submission that
    `make data` fetched (a wrong row count refused, naming it), then uploaded; `make score`
    lists it with its public score."""
    import pandas as pd
    kernel = "tester/kagglekit-store-sales"
    comp = "store-sales-time-series-forecasting"
    data = tmp_path / "data" / comp
    data.mkdir(parents=True)
    ids = list(range(3000888, 3000888 + 4))
    pd.DataFrame({"id": ids, "sales": 0.0}).to_csv(data / "sample_submission.csv", index=False)
    metrics = json.dumps({"submission": {"file": "submission.csv", "columns": ["id", "sales"]},
                          "chain": {"fit_lstm": "trained"}}).encode()  # a file competition may train
    with FakeKaggle() as kaggle:
        kaggle.kernels[kernel] = {"text": "{}", "newTitle": "t", "language": "python",
                                  "kernelType": "notebook", "competitionDataSources": [comp]}
        kaggle.versions = 3
        env = {**_env(kaggle, tmp_path), "KAGGLEKIT_DATA": str(tmp_path / "data")}
        out = str(tmp_path / "runs")
        kaggle.files = {"metrics.json": metrics,
                        "submission.csv": b"id,sales\n3000888,1.5\n3000889,2.0\n3000890,0.0\n"}
        short = _cli("submit", "timeseries_store_sales", "--output", out, env=env)
        assert short.returncode == 1 and "3 rows, the competition expects 4" in short.stderr
        assert kaggle.uploaded == []
        good = b"id,sales\n3000888,1.5\n3000889,2.0\n3000890,0.0\n3000891,4.25\n"
        kaggle.files["submission.csv"] = good
        ok = _cli("submit", "timeseries_store_sales", "--output", out, "-m", "ensemble", env=env)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert kaggle.uploaded == [(comp, "submission.csv", good)]  # the file, byte for byte
        assert not [p for p, _ in kaggle.requests if p.endswith("/CreateCodeSubmission")]
        assert kaggle.submissions[0]["description"] == "kagglekit-store-sales v3: ensemble"
        kaggle.score(kaggle.submissions[0]["ref"], "0.4133")
        scored = _cli("score", "timeseries_store_sales", "--output", out, env=env)
    assert scored.returncode == 0 and "0.4133" in scored.stdout and "latest public score" in scored.stdout
