"""A model's weights in 4 or 8 bits for inference (``quantise``), judged on the competition's
metric against the unquantised model (``judge``).

Quantised models are judged by perplexity in papers and model cards; a competition is judged by
its metric on its rows. ``judge`` scores both models' answer-token probabilities on rows none of
the models trained on (a held-out slice: a fold's out-of-fold rows were trained on by the other
folds, so a merged or fold-averaged model must not be judged on them) and reports the drop.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..state import atomic

AUTOROUND_PIN = "auto-round==0.16.1"  # requirements.txt's


def require(kernel: str = "<kernel>") -> None:
    """Refuse, before any training, a run that will quantise where AutoRound is not installed
    (Kaggle's image lacks it), naming the fix."""
    import importlib.util
    if importlib.util.find_spec("auto_round") is None:
        raise ModuleNotFoundError(
            f"quantising needs auto-round, which is not installed here (Kaggle's image lacks it): add \"auto-round\" "
            f"to \"wheels\" in kernel-metadata/{kernel}.json (make push attaches them offline), or locally "
            f"pip install {AUTOROUND_PIN}")


def quantise(model_dir: Path | str, folder: Path | str, calibration: list[str], *, bits: int = 4,
             group_size: int = 128, iters: int = 0, seqlen: int = 512) -> Path:
    """The model in ``model_dir`` with its linear layers' weights in ``bits`` bits (W4A16 or W8A16:
    activations stay fp16), by AutoRound (Intel's maintained quantiser), calibrated on
    ``calibration`` (the unit's own prompts), saved in its ``auto_round`` format: transformers
    loads it (torch kernels on a CPU, Marlin or ExLlama on a GPU) and vLLM serves it on a T4
    (Marlin W4A16 on sm75). ``iters=0``: round to nearest, seconds on a CPU; ``iters=200``:
    AutoRound's tuned rounding, minutes per billion parameters on a GPU. Each group of
    ``group_size`` input weights shares a scale (the largest of 128, 64 and 32 that divides every
    layer, else one per row). Written whole or not at all."""
    if bits not in (2, 3, 4, 8):
        raise ValueError(f"bits={bits}: AutoRound's weight-only schemes take 2, 3, 4 or 8 bits (4 is W4A16)")
    if not calibration:
        raise ValueError("quantise needs calibration prompts: the unit's own (a few hundred)")
    from ..readers.pretrained import quiet_transformers
    quiet_transformers()  # AutoRound's advice too (other backends, newer arguments), before its import reads it
    from auto_round import AutoRound
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # a copy of its own: AutoRound moves the layers of the model it quantises off the CPU (to meta)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    lengths = sorted(len(tokenizer(p)["input_ids"]) for p in calibration)
    folder = Path(folder)
    with atomic.atomic_folder(folder) as partial:
        rounder = AutoRound(model, tokenizer, bits=bits, group_size=_group_size(model, group_size), sym=True,
                            iters=iters, dataset=list(calibration), nsamples=len(calibration),
                            seqlen=max(8, min(seqlen, lengths[len(lengths) // 2])))
        rounder.quantize_and_save(str(partial / "export"), format="auto_round")
        saved = next(p.parent for p in sorted((partial / "export").rglob("config.json")))
        for path in saved.iterdir():
            shutil.move(str(path), partial / path.name)
        shutil.rmtree(partial / "export")
    return folder


def _group_size(model, wanted: int) -> int:
    widths = {m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)}
    for size in (wanted, 128, 64, 32):
        if size <= min(widths) and all(w % size == 0 for w in widths):
            return size
    return -1  # one scale per output row


@dataclass
class Judged:
    metric: str
    reference: float  # the unquantised model's score
    quantised: float
    largest_diff: float  # the largest difference of an answer-token probability
    rows: int

    @property
    def drop(self) -> float:
        return self.reference - self.quantised

    def describe(self) -> str:
        return (f"{self.metric} on {self.rows:,} held-out rows: {self.quantised:.4f} quantised against "
                f"{self.reference:.4f} ({-self.drop:+.4f}); answer probabilities differ by at most "
                f"{self.largest_diff:.3g}")


def judge(reference_dir: Path | str, quantised_dir: Path | str, prompts: list[str], truth, token_ids: list[int],
          score, metric: str = "accuracy", device="cpu", batch_size: int = 16) -> Judged:
    """Both models' answer-token probabilities on ``prompts`` (rows no model trained on), scored
    by ``score(truth, probabilities)``: the competition's metric, not perplexity."""
    from . import hfbackend
    probs = []
    for folder in (reference_dir, quantised_dir):
        loaded = hfbackend.load(folder, device, dtype=torch.float32)
        probs.append(hfbackend.answer_probs(loaded, prompts, token_ids, batch_size))
    return Judged(metric, float(score(truth, probs[0])), float(score(truth, probs[1])),
                  float(np.abs(probs[0] - probs[1]).max()), len(prompts))
