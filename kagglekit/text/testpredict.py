"""The test texts predicted by every fold's finished weights: the notebook's loop, or the LLM engine.

The loop (``fold_by_fold``) restores each fold's best adapters onto one model, loaded once, and
predicts with it on every GPU: any head, the training's own code path.

A decoder read through its answer tokens (``text.answerhead``) is what Kaggle's inference kernels
serve with vLLM (Jigsaw 2025's did). ``through_engine`` hands it to ``kk.llmengine``: each fold's
finished adapters merged into the base on the CPU (each update in fp32, added into the 16-bit
base in place, rounded once), saved as a plain transformers folder in the run's scratch (a 7B fold is 14 GB: one fold on
the disk at a time) in the dtype the engine computes in: fp16 where there is a GPU (a T4's), fp32
on a CPU (rounded to fp16, a random Llama's LoRA trained at lr 1e-2 moved a probability by 0.05 on
2026-12-07), and the engine reads that folder, one engine per GPU, the prompts sharded by tokens,
each shard a unit. A killed version resumes at its shard, and a fold whose shards are all done is
not merged again: a shard's key names the backend, the merge's code and dtype, and the fold's own
unit key (every input of its training), so a fold of other parameters or data is predicted anew.
The probabilities are the next token's over the class tokens alone, the head's own softmax: on the
same prompts and a CPU they equal the loop's within 1e-4 (tests/test_text.py, tests/test_vllm.py).
"""
from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..llm import llmengine, llmexport
from ..machine.budget import Unfinished
from ..state import keys

ENGINES = ("loop", "hf", "vllm", "auto")


def check(engine: str, head: str, predict_precision: str = "auto", load_in_4bit: bool = False) -> None:
    """Refuses an engine this run cannot predict with, saying which it can."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: one of {', '.join(ENGINES)}")
    if engine != "loop" and head != "answer_token":
        raise ValueError(f"engine={engine!r} serves a decoder read through its answer tokens (head='answer_token'); "
                         f"head={head!r} is predicted by the notebook's own loop: set engine='loop'")
    if engine != "loop" and predict_precision == "int8":
        raise ValueError(f"predict_precision='int8' quantises the notebook's loop; engine={engine!r} serves the "
                         "merged folds: set one of them back (engine='loop' or predict_precision='auto')")
    if engine != "loop" and load_in_4bit:  # the merge needs the base's own weights, not NF4's rounding of them
        raise ValueError(f"engine={engine!r} serves each fold merged into its base, and load_in_4bit=True holds the "
                         "base in 4 bits: predict with engine='loop', or train on the 16-bit base to serve it")


def _finished(manager, fold) -> None:
    if manager.finished() is None:
        raise RuntimeError(f"no finished training of {fold.name} attached: submit a version whose folds all "
                           "finished, or attach their adapters (make publish NB=text_classification)")


def fold_by_fold(model, folds, checkpoints: Callable, predict: Callable) -> list:
    """``predict(fold)`` with each fold's best weights restored onto ``model`` in turn (``checkpoints(fold,
    model)``: the fold's checkpoints bound to it; the previous fold's adapters are replaced)."""
    out = []
    for fold in folds:
        manager = checkpoints(fold, model)
        _finished(manager, fold)
        manager.restore_best(model)  # every parameter that trains
        out.append(predict(fold))
    return out


def engine_dtype() -> torch.dtype:
    """What the engine computes in, so what a fold is saved in: fp16 on a GPU (a T4's), fp32 on a CPU."""
    return torch.float16 if torch.cuda.is_available() else torch.float32


def export_fold(model, manager, tokenizer, folder: Path, fold) -> Path:
    """``fold``'s best adapters restored onto ``model`` (an answer-token classifier) and merged into its
    base on the CPU, saved with ``tokenizer`` as a causal LM folder the engines load, in ``engine_dtype``
    (merged into a 16-bit base in place: no fp32 copy of the whole model)."""
    _finished(manager, fold)
    manager.restore_best(model)
    lm, dtype = model.lm.cpu(), engine_dtype()
    merged = llmexport.merge_lora(lm, dtype) if hasattr(lm, "merge_and_unload") else lm  # lora_r 0: the whole model
    return llmexport.save_fp16(merged, tokenizer, folder, dtype)


def through_engine(run, folds, export: Callable[[object, Path], Path], prompts: list[str], answer_ids: list[int],
                   engine: str, tokenizer) -> np.ndarray:
    """The mean over ``folds`` of the engine's answer-token probabilities of ``prompts`` (``export(fold,
    folder)`` writes fold's merged model there, only when one of its shards is left to compute: each
    shard is named by the fold's training, its key, and the merge's code and dtype). Shards the
    session's deadline left: ``Unfinished``."""
    merge = {"code": keys.code_digest([export_fold, llmexport.merge_lora]), "dtype": str(engine_dtype())}
    probs = []
    for fold in folds:
        folder = run.scratch(f"merged-{fold.name}")
        got = llmengine.infer(run, f"test-{fold.name}", functools.partial(export, fold, folder), prompts,
                              llmengine.Task.answers(answer_ids), backend=engine,
                              identity={"fold": fold.unit.key, "merge": merge}, tokenizer=tokenizer)
        shutil.rmtree(folder, ignore_errors=True)
        if not got.complete:
            raise Unfinished(f"{fold.name}: {len(got.pending)} shards of the test texts left at the session's "
                             "deadline: the next version computes them (the finished shards are kept)")
        probs.append(np.stack(got.outputs))
    return np.mean(probs, axis=0)
