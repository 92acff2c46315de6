"""Fine-tuning a causal LM to write answers (supervised fine-tuning): the generic parts.

The notebook (``text_generation``) holds the pipeline; this module what any such pipeline
repeats, on top of transformers and peft:

- ``PromptedTargets``: each row's prompt, then its target and the end token, as token ids; the
  loss falls on the target and the end token only (labels -100 on the prompt), so the model
  learns to write the answer and to stop, never to predict the prompt;
- ``collator``: right padding to the batch's longest row (to a multiple of 8 for fp16 tensor
  cores), labels -100 on the padding;
- ``load_causal_lm``: the attached model, LoRA adapters on every linear layer when ``lora_r`` >
  0 (peft), the frozen base in the run's 16-bit type beside fp32 adapters (``text.classifier``'s rules);
- ``export``: the trained model as the engines load one (``llm.llmexport``: LoRA merged in fp32,
  saved in fp16 after an fp16 overflow scan on the training prompts).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from ..llm import llmexport
from ..parallel.loaders import to_device
from ..score import metrics
from . import classifier as text

IGNORE = -100  # cross-entropy's ignore_index: prompt and padding positions


class PromptedTargets(Dataset):
    """Token ids of ``prompts[i]`` followed by ``targets[i]`` and the end token, at most
    ``max_length`` in all: a row too long loses its prompt's first tokens (the source's end and
    the prompt's cue stay next to the answer), and its target's end only past half of
    ``max_length``. ``targets`` None: prompts alone (what generation starts from)."""

    def __init__(self, tokenizer, prompts: list[str], targets: list[str] | None, max_length: int):
        if max_length < 8:
            raise ValueError(f"max_length={max_length}: at least 8 tokens (the prompt's and the answer's)")
        prompt_ids = tokenizer(list(prompts), add_special_tokens=True)["input_ids"]
        self.rows, self.cut = [], 0
        answers = tokenizer([" " + t for t in targets], add_special_tokens=False)["input_ids"] if targets else None
        for i, prompt in enumerate(prompt_ids):
            answer = [] if answers is None else answers[i][:max_length // 2] + [tokenizer.eos_token_id]
            keep = max_length - len(answer)
            self.cut += len(prompt) > keep or (answers is not None and len(answers[i]) > max_length // 2)
            self.rows.append((prompt[-keep:], answer))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def lengths(self) -> list[int]:
        return [len(p) + len(a) for p, a in self.rows]

    def __getitem__(self, i: int) -> dict:
        prompt, answer = self.rows[i]
        return {"input_ids": prompt + answer, "labels": [IGNORE] * len(prompt) + answer}


def collator(tokenizer, multiple: int = 8):
    """A batch's rows right-padded to its longest (rounded up to ``multiple``)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def collate(rows: list[dict]) -> dict:
        width = -(-max(len(r["input_ids"]) for r in rows) // multiple) * multiple
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[i, :n], labels[i, :n], mask[i, :n] = torch.tensor(row["input_ids"]), torch.tensor(row["labels"]), 1
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
    return collate


def row_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each row's mean cross-entropy over its answer tokens (the next token's, so shifted by one),
    shape (rows,): averaged over rows, a batch cut in two trains as it would whole."""
    shifted, targets = logits[:, :-1].float(), labels[:, 1:]
    per_token = torch.nn.functional.cross_entropy(shifted.transpose(1, 2), targets, ignore_index=IGNORE,
                                                  reduction="none")
    counted = (targets != IGNORE).sum(1).clamp(min=1)
    return per_token.sum(1) / counted


@torch.no_grad()
def validation_loss(model, rows: PromptedTargets, collate, batch_size: int, device, autocast=None, rank: int = 0,
                    world: int = 1, limit_batches: int | None = None) -> float:
    """The mean of the rows' answer losses (``row_loss``), rank r of w taking every w-th batch of
    rows sorted by length, gathered: the same figure on every rank."""
    model.eval()
    order = sorted(range(len(rows)), key=lambda i: -rows.lengths[i])
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)][rank::world][:limit_batches]
    losses, index = [torch.zeros(0, device=device)], [torch.zeros(0, dtype=torch.long, device=device)]
    for idx in batches:
        batch = to_device(collate([rows[i] for i in idx]), device)
        labels = batch.pop("labels")
        with autocast or torch.autocast(device.type, enabled=False):
            logits = model(**batch).logits
        losses.append(row_loss(logits, labels).float())
        index.append(torch.as_tensor(idx, device=device))
    gathered, _ = metrics.gather(torch.cat(losses), torch.cat(index))
    return float(gathered.mean()) if len(gathered) else float("nan")


def load_causal_lm(model_dir, *, lora_r: int = 0, lora_alpha: int = 0, lora_dropout: float = 0.05,
                   gradient_checkpointing: bool = False, precision=None):
    """``(model, tokenizer)``: the attached causal LM, every weight training (``lora_r`` 0) or LoRA
    adapters of rank ``lora_r`` on every linear layer over a frozen base in the run's half type."""
    from transformers import AutoModelForCausalLM
    tokenizer = text.load_tokenizer(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=text.frozen_dtype(lora_r, precision),
                                                      local_files_only=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=text.NON_REENTRANT)
    if lora_r:
        from peft import LoraConfig, TaskType, get_peft_model
        model = get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, r=lora_r,
                                                 lora_alpha=lora_alpha or 2 * lora_r, lora_dropout=lora_dropout,
                                                 target_modules="all-linear"))
    text.trained_in_fp32(model)
    return model, tokenizer


def export(model, tokenizer, folder: Path | str, scan_batches=()) -> tuple[Path, llmexport.OverflowReport]:
    """``model`` as the engines load one: LoRA folded into the base in fp16 (each update in fp32,
    rounded once), an fp16 overflow scan of that model on ``scan_batches`` (dicts of the model's
    inputs; computed in fp32 a layer at a time), saved in fp16 with its tokenizer, atomically. No
    fp32 copy of the model is made: a 7B export fits a Kaggle kernel's 29 GB. The model is changed
    in place (merged, fp16): export last."""
    fp16 = torch.float16
    model = llmexport.merge_lora(model, fp16) if hasattr(model, "merge_and_unload") else model.to(fp16)
    report = llmexport.overflow_scan(model, scan_batches)
    return llmexport.save_fp16(model, tokenizer, folder), report
