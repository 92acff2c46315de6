"""The Hugging Face transformers backend: batched, left-padded, KV-cached, fp16 on a T4 (fp32 on a
CPU), the default everywhere and complete.

Left padding puts every prompt's last token in the last column, where the next token is read;
positions count from each prompt's first real token (``position_ids`` from the attention mask),
so a padded prompt is computed as it would be alone. Batches are taken from prompts already
sorted by length (a shard's), so they pad little.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass
class Loaded:
    model: Any  # a transformers causal LM, in eval mode, on ``device``
    tokenizer: Any  # left padding, a pad token
    device: torch.device


def load(model_dir: Path | str, device, dtype: torch.dtype | None = None) -> Loaded:
    """The model and tokenizer of ``model_dir``, never downloaded: fp16 on a CUDA card (a T4 has
    no fast bf16), fp32 on a CPU, unless ``dtype`` says otherwise."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..readers.pretrained import quiet_transformers
    quiet_transformers()
    device = torch.device(device)
    dtype = dtype or (torch.float16 if device.type == "cuda" else torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:  # Llama and Qwen ship none: the end token pads (masked anyway)
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True).to(device).eval()
    return Loaded(model, tokenizer, device)


def lengths(tokenizer, prompts: list[str]) -> list[int]:
    """Each prompt's tokens (what shards are cut by)."""
    return [len(ids) for ids in tokenizer(prompts, add_special_tokens=True)["input_ids"]]


def _batch(loaded: Loaded, prompts: list[str]) -> dict:
    batch = loaded.tokenizer(prompts, return_tensors="pt", padding=True).to(loaded.device)
    batch["position_ids"] = (batch["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
    return batch


@torch.inference_mode()
def answer_probs(loaded: Loaded, prompts: list[str], token_ids: list[int], batch_size: int = 16) -> np.ndarray:
    """Per prompt, the next token's probabilities over ``token_ids`` alone (softmax over their
    logits: the answer-token head's output, ``text.answerhead``), as float64 (rows, answers)."""
    out = []
    rows = torch.as_tensor(token_ids, device=loaded.device)
    for start in range(0, len(prompts), batch_size):
        logits = loaded.model(**_batch(loaded, prompts[start:start + batch_size])).logits[:, -1]
        out.append(torch.softmax(logits[:, rows].double(), dim=-1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, len(token_ids)))


@torch.inference_mode()
def generate(loaded: Loaded, prompts: list[str], max_new_tokens: int, *, samples: int = 1,
             temperature: float = 0.0, seed: int = 0, batch_size: int = 16) -> list[list[str]]:
    """Per prompt, ``samples`` completions (the new text only): greedy when ``temperature`` is 0,
    else sampled at it (``seed``: the same seed, the same samples)."""
    tok, out = loaded.tokenizer, []
    sampled = temperature > 0
    for start in range(0, len(prompts), batch_size):
        batch = _batch(loaded, prompts[start:start + batch_size])
        batch.pop("position_ids")  # generate derives them from the mask at every step
        torch.manual_seed(seed + start)
        ids = loaded.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=sampled,
                                    temperature=temperature if sampled else None, top_p=None, top_k=None,
                                    num_return_sequences=samples, pad_token_id=tok.pad_token_id)
        texts = tok.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        out += [texts[i:i + samples] for i in range(0, len(texts), samples)]
    return out
