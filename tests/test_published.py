"""make publish: a finished run's weights through the real kaggle CLI to the loopback server, without
the optimizer's state, with a manifest; a kernel attaching them verifies every file first."""
import io
import json
import os
import zipfile
from pathlib import Path

import pytest
import torch
from test_roundtrip import FakeKaggle, _cli, _env, build_in_tmp  # noqa: F401 (the fixture)

import kagglekit as kk
from kagglekit.state import published

WEIGHTS = "tester/kagglekit-segmentation-3d-weights"


def finished_run(folder: Path) -> Path:
    """A run folder as a finished training leaves it: an earlier and a final checkpoint (each with
    the optimizer's, scheduler's and RNG state), one unfinished training beside them, metrics.json."""
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    for name, steps in (("unet3d/abc123", (10, 20)), ("other/def456", (5,))):
        manager = kk.checkpoint.CheckpointManager(folder / "checkpoints" / name)
        for step in steps:
            manager.save(kk.checkpoint.snapshot(model, optimizer), step=step, final=step == 20)
    (folder / "metrics.json").write_text(json.dumps({"config": {"patch": 96}, "summary": [
        {"result": "validation Dice", "value": 0.61, "passed": True}]}))
    return folder


def _zip_members(blob: bytes) -> dict:
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        return {name: z.read(name) for name in z.namelist() if not name.endswith("/")}


@pytest.mark.slow
def test_make_publish_uploads_the_final_weights_without_optimizer_state_and_their_manifest(tmp_path):
    run = finished_run(tmp_path / "run")
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path)
        done = _cli("publish", "segmentation_3d", "--run", str(run), env=env)
        assert done.returncode == 0, done.stderr
        assert f"{WEIGHTS}: created" in done.stdout and "without optimizer state" in done.stdout
        again = _cli("publish", "segmentation_3d", "--run", str(run), env=env)
        assert f"{WEIGHTS}: unchanged" in again.stdout and len(kaggle.datasets[WEIGHTS]["versions"]) == 1
        uploaded = kaggle.datasets[WEIGHTS]["versions"][-1]
        assert kaggle.datasets[WEIGHTS]["private"]
    assert set(uploaded) == {"checkpoints.zip", "metrics.json", "kagglekit-manifest.json"}
    members = _zip_members(uploaded["checkpoints.zip"])
    payloads = [n for n in members if n.endswith(".pt")]  # the final one only; the unfinished training left out
    assert len(payloads) == 1 and payloads[0].endswith("unet3d/abc123/step-00000020.pt")
    state = torch.load(io.BytesIO(members[payloads[0]]), weights_only=True)
    assert set(state) == {"model"}  # no optimizer, scheduler or RNG state
    manifest = json.loads(uploaded["kagglekit-manifest.json"])
    assert manifest["config"] == {"patch": 96} and manifest["headline"][0]["value"] == 0.61
    assert manifest["source"].startswith("local run ") and manifest["optimizer_state"] is False
    import hashlib
    listed = {Path(name).name: digest for name, digest in manifest["files"].items()}
    assert listed["step-00000020.pt"] == hashlib.sha256(members[payloads[0]]).hexdigest()


def test_an_attached_publication_is_verified_and_a_tampered_file_refused_by_name(tmp_path, monkeypatch):
    from kagglekit.tools.publish import weights
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # kernel-metadata/ is read from the checkout
    folder, _ = weights.assemble("segmentation_3d", finished_run(tmp_path / "run"))
    inputs = tmp_path / "input" / "datasets" / "tester"
    inputs.mkdir(parents=True)
    mounted = inputs / "kagglekit-segmentation-3d-weights"
    import shutil
    shutil.copytree(folder, mounted)
    monkeypatch.setenv("KAGGLEKIT_INPUT", str(tmp_path / "input"))
    from kagglekit.machine import inputs as inputs_mod
    inputs_mod.forget()  # a new input tree in this process
    checked = published.verify_inputs()
    assert [c["files"] for c in checked] == [3]  # payload, sidecar, metrics.json
    found = kk.checkpoint.CheckpointManager(tmp_path / "working" / "checkpoints" / "unet3d").search_roots
    assert found == [mounted / "checkpoints" / "unet3d"]  # the notebook's own checkpoints find them
    old_layout = tmp_path / "old" / "kagglekit-segmentation-3d-weights"  # /kaggle/input/<slug>, before 2026
    shutil.copytree(folder, old_layout)
    monkeypatch.setenv("KAGGLEKIT_INPUT", str(tmp_path / "old"))
    inputs_mod.forget()
    assert [c["folder"] for c in published.verify_inputs()] == [str(old_layout)]
    found = kk.checkpoint.CheckpointManager(tmp_path / "working" / "checkpoints" / "unet3d").search_roots
    assert found == [old_layout / "checkpoints" / "unet3d"]
    payload = next(mounted.rglob("*.pt"))
    data = payload.read_bytes()
    payload.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])  # one byte changed
    with pytest.raises(published.TamperedError, match=f"{payload.name}: its sha256 differs"):
        published.verify(mounted)
    os.remove(payload)
    with pytest.raises(published.TamperedError, match=f"{payload.name}: listed in .* but missing"):
        published.verify(mounted)
    inputs_mod.forget()


MODEL = "tester/kagglekit-text-classification-weights/pyTorch/default"


@pytest.mark.slow
def test_make_publish_to_a_model_versions_it_and_the_inference_kernel_attaches_that_version(tmp_path, monkeypatch):
    """TO=model through kagglehub's own model_upload to the loopback server: the folder's tree kept as
    it is (no archive), a version per change, none when nothing changed; the inference kernel
    refused before it is published, then pushed attaching that exact version beside its base; the
    version downloaded by handle verifies against its manifest where Kaggle mounts a model."""
    run = finished_run(tmp_path / "run")
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path)
        early = _cli("push", "text_classification_infer", env=env)
        assert early.returncode == 2 and "has no version on Kaggle" in early.stderr
        assert "make publish NB=text_classification TO=model first" in early.stderr
        assert kaggle.pushed() == []  # refused before any upload
        first = _cli("publish", "text_classification", "--run", str(run), "--to", "model", env=env)
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        assert f"{MODEL}/1: created" in first.stdout
        again = _cli("publish", "text_classification", "--run", str(run), "--to", "model", env=env)
        assert f"{MODEL}/1: unchanged" in again.stdout
        (run / "metrics.json").write_text(json.dumps({"config": {"patch": 96}, "summary": [
            {"result": "validation Dice", "value": 0.65, "passed": True}]}))
        second = _cli("publish", "text_classification", "--run", str(run), "--to", "model", env=env)
        assert f"{MODEL}/2: new version" in second.stdout, second.stdout[-2000:] + second.stderr[-2000:]
        model = kaggle.models["tester/kagglekit-text-classification-weights"]
        versions = model["instances"]["MODEL_FRAMEWORK_PY_TORCH/default"]
        assert model["private"] and len(versions) == 2
        assert sorted(versions[1]) == ["checkpoints/unet3d/abc123/step-00000020.json",
                                       "checkpoints/unet3d/abc123/step-00000020.pt",
                                       "kagglekit-manifest.json", "metrics.json"]  # the tree, no records
        manifest = json.loads(versions[1]["kagglekit-manifest.json"])
        assert manifest["base_models"] == ["microsoft/deberta-v3-base/transformers/default/1"]

        (Path(os.environ["KAGGLEKIT_BUILD"]).parent / "publish" / "kagglekit-text-classification-weights.model.json"
         ).unlink()  # make clean, or another machine: Kaggle's current version is asked for
        pushed = _cli("push", "text_classification_infer", env=env)
        assert pushed.returncode == 0, pushed.stdout[-2000:] + pushed.stderr[-2000:]
        sources = kaggle.pushed()[-1]["modelDataSources"]
        assert sources == ["microsoft/deberta-v3-base/transformers/default/1", f"{MODEL}/2"]

        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kagglehub"))
        import kagglehub
        mounted = tmp_path / "input" / "models" / MODEL.lower() / "2"
        kagglehub.model_download(f"{MODEL}/2", output_dir=str(mounted))
    import shutil
    shutil.rmtree(mounted / ".complete", ignore_errors=True)  # kagglehub's marker: Kaggle mounts the files only
    monkeypatch.setenv("KAGGLEKIT_INPUT", str(tmp_path / "input"))
    from kagglekit.machine import inputs as inputs_mod
    inputs_mod.forget()
    assert [c["folder"] for c in published.verify_inputs()] == [str(mounted)]
    found = kk.checkpoint.CheckpointManager(tmp_path / "working" / "checkpoints" / "unet3d").search_roots
    assert found == [mounted / "checkpoints" / "unet3d"]
    inputs_mod.forget()


@pytest.mark.slow
def test_make_output_fetches_a_given_versions_files_and_names_a_missing_one(tmp_path):
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path)
        kaggle.outputs[("tester/kagglekit-quickstart", 3)] = {"metrics.json": b'{"summary": []}',
                                                             "checkpoints/mlp/abc/step-00000010.json": b"{}"}
        out = tmp_path / "runs"
        done = _cli("output", "quickstart", "--version", "3", "--output", str(out), env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        missing = _cli("output", "quickstart", "--version", "9", "--output", str(out), env=env)
    assert missing.returncode == 2 and "has no output of version 9" in missing.stderr
    fetched = out / "kagglekit-quickstart" / "v3"
    assert sorted(str(p.relative_to(fetched)) for p in fetched.rglob("*") if p.is_file()) == \
        ["checkpoints/mlp/abc/step-00000010.json", "kaggle.json", "metrics.json"]
    assert json.loads((fetched / "kaggle.json").read_text())["version"] == 3


def test_a_run_that_exported_its_model_publishes_it_where_model_dir_finds_it(tmp_path, monkeypatch):
    """text_generation's output holds ``model/`` (the fp16 transformers folder the engines load):
    published beside the checkpoints, listed in the manifest, found as a ``model_dir`` unchanged."""
    import shutil

    from kagglekit.text import textsets
    from kagglekit.tools.publish import weights
    run = finished_run(tmp_path / "run")
    model = textsets.write_standin_model(tmp_path / "models", "llama")
    shutil.copytree(model, run / "model")
    monkeypatch.setenv("KAGGLEKIT_BUILD", str(tmp_path / "build"))
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # kernel-metadata/ is read from the checkout
    out, manifest = weights.assemble("text_generation", run)
    assert {"model/config.json", "model/model.safetensors", "model/tokenizer.json"} <= set(manifest["files"])
    assert published.verify(out)["files"] == manifest["files"]
    found = kk.pretrained.find_model_dir(str(out), [])
    assert found == out / "model" and kk.pretrained.base_identity(found) == kk.pretrained.base_identity(model)
    shutil.rmtree(run / "checkpoints")  # a run with the export alone still publishes it
    assert "model/config.json" in weights.assemble("text_generation", run)[1]["files"]
    shutil.rmtree(run / "model")
    with pytest.raises(weights.PublishError, match="holds no finished training"):
        weights.assemble("text_generation", run)
