"""The LLM engine's overhead against plain transformers loops, in the same run, on this CPU.

A stand-in Llama (random weights, ``textsets.write_standin_model``: hidden 256, 4 layers) scores
the answer tokens of N built-in texts of mixed length (4 to 60 words). Three ways:
- the engine (``kk.llmengine.infer``: shards by tokens, length-sorted batches, each shard a unit
  written to the cache, its admission check): what a notebook calls;
- a plain batched loop in the prompts' own order (left padding, the same batch size): what a
  notebook would write;
- a plain loop of one unpadded forward per prompt.
Printed: prompt tokens/s of each and the engine's ratio to both (> 1: faster). Outputs are
checked equal (fp32) before any figure is printed.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import kagglekit as kk
from kagglekit.llm import hfbackend, llmengine
from kagglekit.text import textsets

DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": ""}


def plain_batched(loaded, prompts, ids, batch: int) -> np.ndarray:
    return hfbackend.answer_probs(loaded, prompts, ids, batch)  # the same code, without sorting or units


@torch.inference_mode()
def plain_single(loaded, prompts, ids) -> np.ndarray:
    rows = []
    for p in prompts:
        logits = loaded.model(**loaded.tokenizer(p, return_tensors="pt")).logits[0, -1, ids]
        rows.append(torch.softmax(logits.double(), -1).numpy())
    return np.stack(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=600)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llm-bench-"))
    model_dir = textsets.write_standin_model(work / "models", "llama", hidden=256, layers=4)
    prompts = [f"Text: {t}\nAnswer:" for t, _ in textsets.texts(args.prompts, 1, min_words=4, max_words=60)]
    loaded = hfbackend.load(model_dir, "cpu")
    ids = [5, 6, 7]
    tokens = sum(hfbackend.lengths(loaded.tokenizer, prompts))
    plain_batched(loaded, prompts[:32], ids, args.batch)  # warm-up
    timed = {}
    started = time.perf_counter()
    reference = plain_single(loaded, prompts, ids)
    timed["one prompt at a time"] = time.perf_counter() - started
    started = time.perf_counter()
    batched = plain_batched(loaded, prompts, ids, args.batch)
    timed["batched in the prompts' order"] = time.perf_counter() - started
    os.environ["KAGGLEKIT_OUTPUT"] = str(work / "out")
    run = kk.start(dict(DECLARED), "llm-bench", declared=dict(DECLARED), verbose=False)
    started = time.perf_counter()
    got = llmengine.infer(run, "bench", model_dir, prompts, llmengine.Task.answers(ids), batch_size=args.batch,
                          workers=1)
    timed["engine"] = time.perf_counter() - started
    engine = np.stack(got.outputs)
    assert np.abs(engine - reference).max() < 1e-5 and np.abs(batched - reference).max() < 1e-5
    print(f"{args.prompts} prompts, {tokens} prompt tokens, batch {args.batch}, {torch.get_num_threads()} threads")
    for name, seconds in timed.items():
        print(f"  {name:32s} {tokens / seconds:10.0f} tokens/s  ({seconds:.2f} s)")
    for name in ("one prompt at a time", "batched in the prompts' order"):
        print(f"engine / {name}: x{timed[name] / timed['engine']:.2f}")


if __name__ == "__main__":
    main()
