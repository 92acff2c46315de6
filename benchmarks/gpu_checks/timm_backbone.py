"""A timm backbone by `model_dir` (kagglekit/images/backbones.py), where timm imports: the lent
machine's image has timm and torchvision at its CUDA torch's version, which these machines cannot
install beside the pinned CPU torch. A resnet18 of random weights saved by timm's own
``save_for_hf`` (as the timm models on Kaggle Models are), read back by the kit: the same outputs
as the saved model when the classes agree, a new head of the notebook's classes (everything else
the saved weights) when they differ; then the image notebook on it, two folds on the card as on a
T4, its input size and normalisation from the backbone's config."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, main

os.environ["KAGGLEKIT_AS"] = "t4"


def _saved(root: Path) -> tuple[Path, object]:
    import timm
    import torch
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    folder = root / "models" / "timm" / "resnet18" / "pytorch" / "random" / "1"
    timm.models.save_for_hf(model, str(folder))  # config.json + model.safetensors, as the Hub's timm/ models
    return folder, model


def check():
    import timm
    import torch

    from kagglekit.images import backbones
    with tempfile.TemporaryDirectory(prefix="gpu-check-timm-") as root:
        folder, saved = _saved(Path(root))
        found = backbones.read(folder)
        x = torch.randn(4, 3, found.side, found.side)
        same = found.create(10).eval()
        with torch.no_grad():
            diff = float((same(x) - saved(x)).abs().max())
        three = found.create(3)
        kept = {k: v for k, v in saved.state_dict().items() if not k.startswith("fc.")}
        body_equal = all(torch.equal(three.state_dict()[k], v) for k, v in kept.items())
        out = Path(root) / "runs"
        done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", "image_classification", "-p",
                               f"model_dir={str(folder)!r}", "-p", "epochs=2", "-p", "folds=2", "-p", "image_size=64",
                               "--output", str(out)], cwd=REPO, capture_output=True, text=True, timeout=100)
        metrics = next(out.glob("image_classification/*/metrics.json"), None)
        scores = json.loads(metrics.read_text()).get("scores", {}) if metrics else {}
    facts = {"timm": timm.__version__, "same_head_max_diff": diff,
             "new_head": list(three.get_classifier().weight.shape),
             "body_equal": body_equal, "notebook_exit": done.returncode, "scores": scores,
             "tail": (done.stdout + done.stderr).strip().splitlines()[-4:]}
    ok = diff < 1e-5 and body_equal and facts["new_head"][0] == 3 and done.returncode == 0 and "cnn" in scores
    return ok, facts


if __name__ == "__main__":
    main(check)
