"""vLLM for a Kaggle T4 kernel (issue 85): the lock of what it needs beyond Kaggle's image
(setup/vllm-gpu-lock.txt, `make vllm-lock`), and the install cell that puts those wheels where
only the engine's process reads them."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kagglekit.llm import vllmbackend
from kagglekit.tools.publish import build, vllmwheels, wheels

REPO = Path(__file__).resolve().parents[1]
LOCK = wheels.pins_in(REPO / wheels.ENGINE_LOCK)


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    monkeypatch.chdir(REPO)  # where make push runs: the lock, the image list and requirements.txt


def test_the_lock_is_the_pinned_vllm_beside_the_images_torch_never_shipping_the_images_own():
    """A kernel gets exactly the vLLM the project pins, and nothing the image already holds at that version:
    the image's torch stack above all (vLLM's CUDA kernels load against the image's torch)."""
    name, version = vllmwheels.VLLM.split("==")
    assert LOCK[name] == version
    image = wheels.pins_in(vllmwheels.IMAGE)
    assert not set(LOCK) & {"torch", "torchvision", "torchaudio", "triton"}
    assert not [n for n, v in LOCK.items() if image.get(n) == v]
    assert LOCK["transformers"] != image["transformers"]  # why it needs a folder of its own


def test_a_vllm_built_on_another_torch_than_the_images_is_refused_naming_both_and_the_fix():
    with pytest.raises(wheels.WheelError, match=r"vllm==0\.33\.0 requires torch==2\.14\.0, Kaggle's image .* has "
                                                r"torch==2\.13\.0: .* Pin the vLLM"):
        vllmwheels.check_torch("vllm==0.33.0", {"torch": "2.14.0"}, wheels.pins_in(vllmwheels.IMAGE))
    vllmwheels.check_torch(vllmwheels.VLLM, {"torch": "2.13.0"}, wheels.pins_in(vllmwheels.IMAGE))


def test_pips_conflict_names_the_images_versions_vllm_refuses():
    said = ("The conflict is caused by:\n    The user requested (constraint) Transformers==5.0.0\n"
            "    vllm 0.32.0 depends on transformers<5.20.0 and >=5.16.1")
    assert vllmwheels.refused_constraints(said) == {"transformers"}


def test_a_kernel_naming_vllm_gets_the_whole_lock_apart_from_its_other_wheels():
    extras, engine = wheels.kernel_wheels(["sacrebleu", "vllm"])
    assert list(extras) == ["sacrebleu"] and set(engine) == set(LOCK)
    assert engine["transformers"] == f"transformers-{LOCK['transformers']}-"
    assert wheels.kernel_wheels(["sacrebleu"])[1] == {}


@pytest.mark.slow
def test_the_install_cell_puts_the_engines_wheels_where_only_the_engines_process_reads_them(tmp_path):
    """The cell as a kernel runs it, on two of the lock's real wheels from a wheels dataset's mount: they are
    installed, the notebook's Python does not import them, a process given KAGGLEKIT_VLLM_SITE does."""
    engine = {"interegular": LOCK["interegular"], "partial-json-parser": LOCK["partial-json-parser"]}
    mount = tmp_path / "input" / "datasets" / "me" / "kagglekit-wheels"
    found = wheels.fetch(list(engine), mount, wheels.target_of(sys.executable), versions=engine)
    prefixes = {name: wheels.wheel_name(name, version) for name, version in engine.items()}
    cell = build.install_cell(found["interegular"], {"commit": "abc", "dirty": False}, owner="me", engine=prefixes)
    check = ("import importlib.util, json, os, subprocess, sys\n"
             "site = os.environ['KAGGLEKIT_VLLM_SITE']\n"
             "env = {**os.environ, 'PYTHONPATH': site}\n"
             "engine = subprocess.run([sys.executable, '-c', 'import interegular, partial_json_parser'], env=env)\n"
             "print(json.dumps({'notebook': importlib.util.find_spec('partial_json_parser') is not None,\n"
             "                  'engine': engine.returncode == 0, 'site': site}))\n")
    done = subprocess.run([sys.executable, "-c", cell["source"] + check], capture_output=True, text=True,
                          env={**os.environ, "KAGGLEKIT_ROOT": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["engine"] and not said["notebook"] and said["site"].endswith("vllm-site")


def test_without_the_wheels_the_cell_fails_first_naming_each_missing_engine_package(tmp_path):
    kit = tmp_path / "kagglekit-0.1.0-py3-none-any.whl"
    kit.write_bytes(b"PK")
    cell = build.install_cell(kit, {"commit": "abc", "dirty": False}, owner="me",
                              engine={"vllm": "vllm-0.32.0-", "xgrammar": "xgrammar-0.2.8-"})
    done = subprocess.run([sys.executable, "-c", cell["source"]], capture_output=True, text=True,
                          env={**os.environ, "KAGGLEKIT_ROOT": str(tmp_path)}, timeout=120)
    assert done.returncode != 0
    assert "vllm (a wheel vllm-0.32.0-*.whl), xgrammar (a wheel xgrammar-0.2.8-*.whl)" in done.stderr
    assert "Attach the dataset me/kagglekit-wheels" in done.stderr


def test_a_site_folder_without_vllm_is_no_vllm_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(vllmbackend.PYTHON_ENV, raising=False)
    monkeypatch.setenv(vllmbackend.SITE_ENV, str(tmp_path))
    ok, why = vllmbackend.available()
    assert not ok and "holds no vllm package" in why and str(tmp_path) in why
    (tmp_path / "vllm").mkdir()
    assert vllmbackend.available() == (True, f"vLLM from {sys.executable} with {tmp_path}")


def test_the_docs_quote_the_locks_vllm_and_its_count():
    text = " ".join((REPO / "docs" / "notebooks.md").read_text().split())
    name, version = vllmwheels.VLLM.split("==")
    torch = wheels.pins_in(vllmwheels.IMAGE)["torch"]
    assert f"(vLLM {version}, the last release built on the image's torch {torch}, " \
           f"and the {len(LOCK) - 1} packages it needs beyond the image" in text


def test_the_sandbox_refuses_a_vllm_kernel_before_fetching_anything(tmp_path):
    """vLLM's CUDA build cannot start without a GPU: `make sandbox NB=text_generation_vllm` says so at once,
    not after minutes of fetching its wheels for a kernel that then fails."""
    done = subprocess.run(["make", "--no-print-directory", "sandbox", "NB=text_generation_vllm", f"KEEP={tmp_path}/k"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    said = "text_generation_vllm: its wheels name vllm, whose CUDA build needs a GPU; the sandbox has none"
    assert said in done.stderr
    assert not (tmp_path / "k" / "wheels").exists()


@pytest.mark.slow
def test_the_wheels_dataset_holds_vllms_versions_beside_the_notebooks_own(tmp_path, monkeypatch):
    """The same package at two versions in one dataset: the notebook's (requirements.txt's huggingface-hub
    1.11.0) and vLLM's (the lock's 2.4.0), each found by the install cell's prefix for its own folder."""
    lock = tmp_path / "lock.txt"
    lock.write_text(f"huggingface-hub=={LOCK['huggingface-hub']}\ninteregular=={LOCK['interegular']}\n")
    monkeypatch.setattr(wheels, "ENGINE_LOCK", lock)
    kit = wheels.fetch(["interegular"], tmp_path / "kit", versions={"interegular": LOCK["interegular"]})["interegular"]
    folder = wheels.build_dataset(tmp_path / "dataset", "me", kit, ["huggingface-hub", "vllm"])
    extras, engine = wheels.kernel_wheels(["huggingface-hub", "vllm"], lock)
    for prefix in [*extras.values(), *engine.values()]:
        assert len([p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix.lower())]) == 1, prefix
    assert extras["huggingface-hub"] != engine["huggingface-hub"]


def test_make_build_gives_the_vllm_kernel_an_install_cell_for_the_whole_lock(tmp_path):
    done = subprocess.run(["make", "--no-print-directory", "build", "NB=text_generation_vllm"], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KAGGLEKIT_BUILD": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    built = json.loads(next(tmp_path.rglob("kagglekit-text-generation-vllm.ipynb")).read_text())
    first = "".join(built["cells"][0]["source"])
    assert "vllm-site" in first and all(f"'{name}'" in first for name in LOCK)
    tagged = lambda tag: next("".join(c["source"]) for c in built["cells"]  # noqa: E731
                              if tag in c["metadata"].get("tags", []))
    assert 'engine = "vllm"' in tagged("injected-parameters")
