"""The audio notebook's student (issue 87) on the BirdCLEF-style stand-in: how much the pool of
unlabelled train soundscapes, labelled fold by fold by the CNN teacher, adds to a small CNN, and
what it saves on the CPU rerun's clock.

    python benchmarks/audio_student.py [--pools 0,4,24] [--widths 8] [--rounds 1] [--seed 0]

Each row runs audio_classification.ipynb on its defaults with ``student_width`` on a stand-in whose
``train_soundscapes/`` holds ``pool`` one-minute soundscapes (the recordings and test soundscapes
are the same bytes whatever the pool: ``audiosynth`` writes the pool last). Printed: the teacher's
and the student's CV (labelled windows, the same folds) and test macro ROC AUC, each one's ms a
window on ``export_threads`` CPU cores, and the student's ratio to its teacher. With ``--rounds`` above 1,
round r + 1's students learn the pool as round r's heard it (``student_rounds``; they stop when CV stops
rising): each round's CV, and the submitted (best) round's test score.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from kagglekit.audio import audiosynth
from kagglekit.tools.notebook_runner import run_notebook

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "audio_classification.ipynb"


def row(pool: int, width: int, rounds: int, seed: int, root: Path) -> dict:
    folder = audiosynth.write_competition(root / f"pool{pool}", seed=seed, pool=pool)
    out = run_notebook(NOTEBOOK, {"data_dir": str(folder), "student_width": width, "student_rounds": rounds,
                                  "seed": seed}, output_root=root / "runs", progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    scores, ms = metrics["scores"], metrics["rerun_ms_per_window"]
    return {"pool": pool, "windows": metrics["pool_windows"], "width": width, "cv": scores["student"],
            "test": scores["test_student"], "teacher_cv": scores["cnn"], "teacher_test": scores["test_cnn"],
            "ms": ms["student"], "teacher_ms": ms["teacher"], "rounds": list(metrics["student_rounds"].values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="0,4,24")
    parser.add_argument("--widths", default="8")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="audio-student-") as tmp:
        rows = [row(int(p), int(w), args.rounds, args.seed, Path(tmp))
                for w in args.widths.split(",") for p in args.pools.split(",")]
    print("| pool soundscapes (windows) | student width | students' CV by round | student CV / test (best round) | "
          "teacher CV / test | ms a window: student / teacher (ratio) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['pool']} ({r['windows']}) | {r['width']} | {', '.join(f'{c:.4f}' for c in r['rounds'])} | "
              f"{r['cv']:.4f} / {r['test']:.4f} | "
              f"{r['teacher_cv']:.4f} / {r['teacher_test']:.4f} | {r['ms']:.4f} / {r['teacher_ms']:.4f} "
              f"({r['ms'] / r['teacher_ms']:.2f}) |")


if __name__ == "__main__":
    main()
