"""A timm backbone attached by `model_dir` (kagglekit/images/backbones.py): the folder read as timm
writes it, its input size and normalisation taken from its own config, its weights read without
running code, and every folder that is not timm's refused by name before any work.

The stand-in folder is written in the exact layout of timm 1.0's ``save_for_hf`` (read from
timm 1.0.31's ``_hub.save_config_for_hf``) for ``timm/resnet18.a1_in1k``, with its quirks:
``input_size`` and ``test_input_size`` as lists, ``interpolation`` and ``crop_pct`` beside
them, ``pretrained_cfg`` without ``architecture`` (moved to the root), ``num_features`` and
``global_pool`` informational only, ``model_args`` absent (older uploads), extra files beside the
weights (README.md, an open_clip config). timm itself cannot be imported on these machines (its
torchvision has no build of the pinned CPU torch): ``create`` runs in benchmarks/gpu_check.py."""
import json
import pickle

import pytest
import torch
from safetensors.torch import save_file

from kagglekit.images import backbones
from kagglekit.readers.pretrained import ModelDirError, find_model_dir

RESNET18_CONFIG = {
    "architecture": "resnet18",
    "num_classes": 1000,
    "num_features": 512,
    "global_pool": "avg",
    "pretrained_cfg": {
        "tag": "a1_in1k", "custom_load": False, "input_size": [3, 224, 224], "test_input_size": [3, 288, 288],
        "fixed_input_size": False, "interpolation": "bicubic", "crop_pct": 0.95, "test_crop_pct": 1.0,
        "crop_mode": "center", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "num_classes": 1000,
        "pool_size": [7, 7], "first_conv": "conv1", "classifier": "fc",
        "origin_url": "https://github.com/huggingface/pytorch-image-models", "paper_ids": "arXiv:2110.00476"},
}


def timm_folder(root, config=RESNET18_CONFIG, weights="model.safetensors"):
    """A Kaggle Model's version as Kaggle mounts it (``models/<owner>/<model>/<framework>/<variation>/<N>``), the
    folder timm saved."""
    folder = root / "models" / "timm" / "resnet18" / "pytorch" / "a1_in1k" / "1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=4))
    (folder / "README.md").write_text("---\ntags:\n- image-classification\n- timm\n---\n")
    state = {"conv1.weight": torch.randn(64, 3, 7, 7), "fc.weight": torch.randn(1000, 512),
             "fc.bias": torch.zeros(1000)}
    if weights.endswith(".safetensors"):
        save_file(state, str(folder / weights))
    else:  # an older upload: a training checkpoint, the weights under "state_dict"
        torch.save({"state_dict": state, "epoch": 100}, folder / weights)
    return folder, state


def test_a_timm_folder_gives_its_architecture_size_normalisation_and_weights(tmp_path):
    folder, state = timm_folder(tmp_path)
    found = backbones.read(find_model_dir("timm/resnet18/pytorch/a1_in1k", [tmp_path]))  # the handle, no version
    assert (found.architecture, found.side, found.num_classes) == ("resnet18", 224, 1000)
    assert found.mean == (0.485, 0.456, 0.406) and found.std == (0.229, 0.224, 0.225)
    assert found.weights == folder / "model.safetensors" and found.pretrained_cfg["classifier"] == "fc"
    loaded = found.state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    assert "resnet18" in found.describe() and "224x224" in found.describe()


def test_an_older_upload_of_a_pickled_checkpoint_is_read_without_running_code(tmp_path):
    folder, state = timm_folder(tmp_path, weights="pytorch_model.bin")
    loaded = backbones.read(folder).state_dict()
    assert all(torch.equal(loaded[k], state[k]) for k in state)

    class Payload:  # what a tampered pickle carries: code run on load
        def __reduce__(self):
            return (print, ("ran",))
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"state_dict": Payload()}, protocol=2))
    with pytest.raises(pickle.UnpicklingError):
        backbones.read(folder).state_dict()


@pytest.mark.parametrize("case, config, said", [
    ("transformers", {"model_type": "bert", "architectures": ["BertModel"]}, "a transformers model ('bert')"),
    ("other", {"name": "x"}, "not a timm model"),
    ("not square", {**RESNET18_CONFIG, "pretrained_cfg": {"input_size": [3, 224, 320]}}, "square RGB"),
    ("greyscale", {**RESNET18_CONFIG, "pretrained_cfg": {"input_size": [1, 224, 224]}}, "square RGB"),
])
def test_a_folder_that_is_not_a_timm_image_backbone_is_refused_by_name(tmp_path, case, config, said):
    folder, _ = timm_folder(tmp_path, config)
    with pytest.raises(ModelDirError, match="model_dir=") as refused:
        backbones.read(folder)
    assert said in str(refused.value)


def test_a_config_without_weights_names_what_the_folder_holds(tmp_path):
    folder, _ = timm_folder(tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelDirError, match=r"none of model.safetensors, pytorch_model.bin.*\['README.md', "
                                            r"'config.json'\]"):
        backbones.read(folder)


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    return backbones.write_packaged(tmp_path_factory.mktemp("models") / "tf_efficientnet_lite0")


def test_the_packaged_imagenet_weights_see_what_a_photograph_shows(packaged):
    """A photograph matplotlib ships (Grace Hopper in uniform) through the folder timm wrote, read back
    as a Kaggle Model's: ImageNet's class 652, "military uniform", first. Random weights, or weights
    mapped onto the wrong layers, give no such answer; a folder save_for_hf writes (num_classes in its
    model_args) failed to create before."""
    from pathlib import Path

    import matplotlib
    import numpy as np
    from PIL import Image
    found = backbones.read(packaged)
    assert (found.architecture, found.side, found.mean) == ("tf_efficientnet_lite0", 224, (0.5, 0.5, 0.5))
    assert found.model_args["num_classes"] == 1000  # what save_for_hf writes, and create must not pass twice
    photo = Image.open(Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg").convert("RGB")
    pixels = torch.from_numpy(np.array(photo.resize((found.side, found.side), Image.Resampling.BICUBIC)))
    x = (pixels.permute(2, 0, 1).float() / 255 - torch.tensor(found.mean).view(3, 1, 1)) / torch.tensor(
        found.std).view(3, 1, 1)
    with torch.no_grad():
        probs = found.create(1000).eval()(x[None]).softmax(-1)[0]
    assert probs.argmax().item() == 652 and probs.max().item() > 0.3
    head = found.create(2).get_classifier()  # a new head for two classes, the body's weights kept
    assert (head.in_features, head.out_features) == (1280, 2)
    assert backbones.write_packaged(packaged) == packaged  # written once: the second call reads nothing


def test_timm_and_torchvision_import_in_the_venv_as_set_up():
    """The set-up's promise (requirements.txt, setup/torchvision_cpu.py): timm's models and torchvision's
    Python part import beside the CPU torch, in a new process as a notebook's kernel starts one."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", "import timm, torchvision; print(torchvision.__version__, "
                           "timm.create_model('resnet18').fc.out_features)"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0].startswith("0.28.0") and done.stdout.split()[1] == "1000"


def test_without_timm_the_backbone_is_refused_naming_the_package(tmp_path, monkeypatch):
    """A kernel whose image lacks timm (or whose torchvision does not import) is told what to attach."""
    import sys
    monkeypatch.setitem(sys.modules, "timm", None)  # an import of timm now raises ImportError
    folder, _ = timm_folder(tmp_path)
    with pytest.raises(ModelDirError, match="needs timm .*Kaggle's image has both"):
        backbones.read(folder).create(10)
