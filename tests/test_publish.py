"""The Kaggle pipeline: metadata validation, build, and the real `kaggle` CLI talking to
a loopback server of ours (tests/kaggle_server.py)."""
import json
import os
import subprocess
import sys
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
    ({"weights_via": "model"}, "weights_via", "beside a weights_from"),
    ({"weights_via": "hub", "weights_from": "quickstart"}, "weights_via", "\"dataset\" (make publish) or"),
    ({"parameters": {"epcohs": 3}}, "parameters", "unknown parameter 'epcohs' (did you mean 'epochs'?) in quickstart"),
    ({"parameters": {"epochs": 2.5}}, "parameters", "'epochs' = 2.5 is a float, but its default 8 is a int"),
    ({"sandbox": {"precision": "fp61"}}, "sandbox", "'precision' = 'fp61' is not one of its choices (did you mean "
                                                    "'fp16'? choose from auto | fp32 | fp16 | bf16) in quickstart"),
])
def test_each_metadata_rule_names_the_file_field_and_fix(tmp_path, change, field, fix):
    path = tmp_path / "quickstart.json"
    with pytest.raises(MetadataError) as err:
        metadata.validate({**GOOD, **change}, path, REPO / "notebooks")
    assert f"{path}: {field}:" in str(err.value) and fix in str(err.value)


def test_an_inference_kernel_must_attach_the_base_its_weights_were_trained_on(tmp_path):
    base = "qwen-lm/qwen3/transformers/0.6b/1"
    (tmp_path / "trainer.json").write_text(json.dumps({**GOOD, "model_sources": [base]}))
    infer = {**GOOD, "weights_from": "trainer", "weights_via": "model"}
    with pytest.raises(MetadataError, match=f"model_sources: '{base}' is missing: trainer's weights"):
        metadata.validate(infer, tmp_path / "quickstart.json", REPO / "notebooks")
    metadata.validate({**infer, "model_sources": [base]}, tmp_path / "quickstart.json", REPO / "notebooks")


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


@pytest.mark.slow
def test_push_keeps_a_wheels_dataset_created_then_versioned_and_attaches_it(tmp_path):
    """The GNN needs torch-geometric, which Kaggle's image lacks: push creates the private
    dataset <owner>/kagglekit-wheels with the kit's and PyG's wheels, waits until it is
    ready, attaches it; a second push with other wheels makes a new version of it."""
    with FakeKaggle() as kaggle:
        env = _clean_env(kaggle.env(tmp_path))
        first = _cli("push", "gnn_node_classification", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "tester/kagglekit-wheels: created" in first.stdout
        dataset = kaggle.datasets["tester/kagglekit-wheels"]
        names = sorted(dataset["versions"][0])
        assert names[0].startswith("kagglekit-") and names[1].startswith("torch_geometric-2.8.1-")
        assert dataset["private"] and dataset["polls"] >= 2  # waited for "ready"
        sent = kaggle.pushed()[0]
        assert sent["datasetDataSources"] == ["tester/kagglekit-wheels"]
        again = _cli("push", "gnn_node_classification", env=env)  # same wheels: no new version
        assert "tester/kagglekit-wheels: unchanged" in again.stdout and len(dataset["versions"]) == 1
        wheel_dir = Path(os.environ["KAGGLEKIT_BUILD"]) / "_wheels_dataset"
        (wheel_dir / ".published.json").write_text("{}")  # as if another kit wheel had gone up
        third = _cli("push", "gnn_node_classification", env=env)
        assert "tester/kagglekit-wheels: new version" in third.stdout, third.stdout + third.stderr
        assert len(dataset["versions"]) == 2
        uploads = [b for p, b in kaggle.requests if p.endswith(("/CreateDataset", "/CreateDatasetVersion"))]
        nb = json.loads(kaggle.pushed()[-1]["text"])
    assert all(kaggle.key not in json.dumps(u) for u in uploads)  # credentials never uploaded
    assert all(kaggle.key not in p.read_text(errors="ignore") for p in wheel_dir.iterdir() if p.is_file()
               and p.suffix != ".whl")
    assert "torch_geometric-2.8.1-" in nb["cells"][0]["source"]  # the first cell installs it


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


def _kaggle_run(value: float, minutes: float, util: float | None = 80.0, **extra) -> dict:
    fit = {"val_loss": 0.5, "oom_count": 0, "stopped": "completed", "precision_events": []}
    if util is not None:
        fit["gpu"] = {"gpu_util_pct": util}
    return {"summary": [{"result": "test PR-AUC", "value": value}], "fit": fit,
            "wall_seconds": 60.0 * minutes, "accelerator": {"ok": True}, **extra}


@pytest.mark.parametrize("remote, verdict, reasons", [
    (_kaggle_run(0.83, 45), "success", ["0.83 reaches 0.8", "1.2% (0.82 local", "45.0 min", "80% at the lowest"]),
    (_kaggle_run(0.81, 75), "acceptable", ["1.2%", "75.0 min (success under 70"]),
    (_kaggle_run(0.77, 50, util=45), "investigate", ["0.77 misses 0.8 (floor 0.7)", "6.1%", "45% at the lowest"]),
    (_kaggle_run(0.84, 50, precision_events=[{"step": 9, "what": "fp16 overflow, rolled back"}]),
     "investigate", ["1 precision events"]),
    (_kaggle_run(0.65, 50), "fail", ["0.65 is under the floor 0.7", "20.7%"]),
    (_kaggle_run(0.83, 50, accelerator={"ok": False, "found": []}), "fail", ["not the GPUs asked for"]),
    ({"config": {}, "accelerator": {"ok": True}}, "fail", ["crashed or stopped"]),
])
def test_compare_judges_each_criterion_of_the_write_up_and_says_why(remote, verdict, reasons):
    from kagglekit.tools.publish import comparison as report
    local = {"summary": [{"result": "test PR-AUC", "value": 0.82}], "fit": {"val_loss": 0.5}}
    result = report.compare(local, remote, {"target": 0.80, "floor": 0.70})
    assert result["verdict"] == verdict and result["ok"] == (verdict != "fail")
    text = report.markdown(result, "demo")
    assert f"Overall: {verdict.upper()}" in text
    for reason in reasons:
        assert reason in text, text


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


def test_make_compare_prints_the_speed_up_of_the_kaggle_run_per_fit_and_overall(tmp_path):
    """A pair of runs as make run and make output leave them: two fits each; the speed-up is
    Kaggle's samples/s over the local run's per fit, the wall times' ratio overall, each side's
    device named."""
    runs = tmp_path / "runs"
    local = {"config": {"epochs": 2}, "wall_seconds": 600.0, "env": {"gpus": [], "cpus": 2},
             "pretrain": {"samples_per_s": 100.0, "val_loss": 0.5}, "fit": {"samples_per_s": 250.0, "val_loss": 0.4},
             "summary": [{"result": "accuracy", "value": 0.9}]}
    remote = {**local, "wall_seconds": 150.0, "pretrain": {"samples_per_s": 700.0, "val_loss": 0.5},
              "fit": {"samples_per_s": 1000.0, "val_loss": 0.4},
              "env": {"gpus": [{"name": "Tesla T4"}] * 2, "gpu_summary": "2 x Tesla T4", "cpus": 4}}
    (runs / "quickstart" / "local-1").mkdir(parents=True)
    (runs / "quickstart" / "local-1" / "metrics.json").write_text(json.dumps(local))
    kaggle_run = runs / "kaggle" / "kagglekit-quickstart" / "v2"
    kaggle_run.mkdir(parents=True)
    (kaggle_run / "metrics.json").write_text(json.dumps(remote))
    done = _cli("compare", "quickstart", "--runs", str(runs), env=_clean_env({}))
    assert "## Speed-up of Kaggle (2 x Tesla T4) over local (CPU (2 cores))" in done.stdout, done.stdout
    assert "| pretrain | 100 | 700 | 7.00x |" in done.stdout and "| fit | 250 | 1000 | 4.00x |" in done.stdout
    assert "Overall (wall time): 4.00x" in done.stdout


def test_make_compare_finds_a_metadata_variants_local_run_under_its_notebook(tmp_path):
    """make run NB=gnn_elliptic writes runs/gnn_node_classification/<config>/: compare looks there,
    and judges by the variant's own criteria (PR-AUC target 0.80)."""
    runs = tmp_path / "runs"
    config = {"data_dir": "ellipticco/elliptic-data-set", "hidden": 128}
    summary = [{"result": "test PR-AUC", "value": 0.85}]
    (runs / "gnn_node_classification" / "data_dir=elliptic-1").mkdir(parents=True)
    (runs / "gnn_node_classification" / "data_dir=elliptic-1" / "metrics.json").write_text(
        json.dumps({"config": config, "summary": summary}))
    kaggle_run = runs / "kaggle" / "kagglekit-gnn-elliptic" / "v1"
    kaggle_run.mkdir(parents=True)
    (kaggle_run / "metrics.json").write_text(json.dumps(
        {"config": config, "summary": [{"result": "test PR-AUC", "value": 0.75}], "wall_seconds": 1800,
         "accelerator": {"ok": True}}))
    done = _cli("compare", "gnn_elliptic", "--runs", str(runs), env=_clean_env({}))
    assert done.returncode == 1, done.stdout + done.stderr  # 11.8% off the local run: a failure
    assert "0.75 misses 0.8 (floor 0.7)" in done.stdout
    assert "| difference from the local run | **FAIL** | 11.8%" in done.stdout


def test_a_metadata_variant_names_a_kernel_of_its_notebook(monkeypatch):
    from kagglekit.tools import kernelnames
    monkeypatch.chdir(REPO)
    assert kernelnames.kernels(["gnn_elliptic", "quickstart"]) == [
        ("gnn_elliptic", Path("notebooks/gnn_node_classification.ipynb")),
        ("quickstart", Path("notebooks/quickstart.ipynb"))]
    assert kernelnames.kaggle_parameters("gnn_elliptic")["data_dir"] == "ellipticco/elliptic-data-set"
    with pytest.raises(SystemExit, match="no notebook named 'nope'"):
        kernelnames.kernels(["nope"])


def test_make_clean_keeps_the_kaggle_outputs_make_output_downloaded(tmp_path):
    import subprocess
    shutil_copy = __import__("shutil").copy
    shutil_copy(REPO / "Makefile", tmp_path / "Makefile")
    for folder in ("runs/kaggle/kagglekit-quickstart/v3", "runs/quickstart/defaults-1", "runs/lab/blend",
                   ".venv/bin", "build"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "runs/kaggle/kagglekit-quickstart/v3/metrics.json").write_text("{}")
    subprocess.run(["make", "--no-print-directory", "clean"], cwd=tmp_path, check=True, capture_output=True)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["kaggle"]
    assert (tmp_path / "runs/kaggle/kagglekit-quickstart/v3/metrics.json").exists()
    assert not (tmp_path / ".venv").exists() and not (tmp_path / "build").exists()
    subprocess.run(["make", "--no-print-directory", "clean"], cwd=tmp_path, check=True, capture_output=True)


def test_the_wheels_dataset_holds_wheels_for_kaggles_python_not_this_one(tmp_path, monkeypatch):
    """Kaggle's image runs CPython 3.12 on manylinux x86_64; this machine's Python may differ:
    a compiled package's wheel is fetched for the image's interpreter (MarkupSafe: cp312)."""
    import sys

    from kagglekit.tools.publish import wheels
    monkeypatch.setattr(wheels, "pinned", lambda package: "3.0.2")
    found = wheels.fetch(["markupsafe"], tmp_path)["markupsafe"]
    assert "-cp312-cp312-" in found.name and "manylinux" in found.name and "x86_64" in found.name
    assert sys.version_info[:2] == (3, 12) or f"cp3{sys.version_info[1]}" not in found.name


@pytest.mark.parametrize("infer", sorted(p.stem for p in (REPO / "kernel-metadata").glob("*.json")
                                         if "weights_from" in json.loads(p.read_text())))
def test_an_inference_kernel_trains_with_its_trainers_parameters(infer):
    """An inference kernel finds its trainer's checkpoints by the training's identity, which holds every
    parameter the training reads: its parameters (and its sandbox's) are the trainer's but predict_only.
    A trainer's recipe changed without its inference kernel's would find no finished training."""
    meta = json.loads((REPO / "kernel-metadata" / f"{infer}.json").read_text())
    trainer = json.loads((REPO / "kernel-metadata" / f"{meta['weights_from']}.json").read_text())
    assert {k: v for k, v in meta["parameters"].items() if k != "predict_only"} == trainer["parameters"]
    assert meta["parameters"]["predict_only"] is True
    assert meta.get("sandbox", {}) == trainer.get("sandbox", {})
