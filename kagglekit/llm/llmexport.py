"""A trained LoRA model made ready for inference: its adapters merged into the base (exact in
fp32; a fold's each summed into one, ``merge_folds``), saved in fp16 as a plain transformers folder
the engines load, after an fp16 overflow scan. ``llmquant`` quantises it and judges the result.

A T4 computes in fp16, whose largest value is 65504: a model trained or merged in fp32 or bf16 can
hold activations past it (outlier features in the residual stream of larger LMs), which turn to
inf on the T4 and NaN after the next norm, while the A100 that trained it saw nothing wrong.
``overflow_scan`` runs the model in fp32 on the unit's own prompts and reports each module's
largest output against fp16's range, so a model that would overflow is caught before a rerun: the
merged fp16 model itself, each layer lent fp32 weights for its own forward (``in_fp32``), so the
scan needs no fp32 copy of the model.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..state import atomic

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504
# safetensors copies a shard into memory to write it, and transformers' default shard is 50 GB: a
# 7B model saved whole would need its 14 GB twice over, past a Kaggle kernel's 29 GB
SHARD_SIZE = "2GB"


def merge_lora(model, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """``model`` (a peft model) with its adapters folded into the base weights, in fp32: the
    merged model computes what the adapted one did (PEFT's ``merge_and_unload``).

    ``dtype``: the merged model in that type instead, a 16-bit base cast to it first (a T4's fp16
    base already is; an fp32 base merges in fp32 and is cast after). Each update is computed from
    fp32 adapters and PEFT adds it into the base weight in place, in fp32, rounded once: equal to
    the fp32 merge cast to ``dtype``, with one layer's update alive at a time. A 7B base held in
    fp16 merges in its 14 GB, where the whole model in fp32 needs 28 GB (a Kaggle kernel has 29)."""
    if not hasattr(model, "merge_and_unload"):
        raise TypeError(f"{type(model).__name__} has no LoRA adapters to merge (a peft model has)")
    if dtype is None or dtype == torch.float32:
        return model.float().merge_and_unload()
    for name, p in model.named_parameters():  # the adapters (a few MB) in fp32: their update is not rounded first
        if "lora_" in name or p.dtype != torch.float32:  # an fp32 base merges in fp32, rounded after: once too
            p.data = p.data.float() if "lora_" in name else p.data.to(dtype)
    return model.merge_and_unload().to(dtype)  # what is not a parameter (buffers) in dtype too


def merge_folds(model, adapters: list[str], weights: list[float] | None = None,
                dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The LoRA adapters ``adapters`` of one base (a fold's each, loaded with ``load_adapter``)
    merged into it as one model: their updates summed with ``weights`` (default: the mean),
    exactly (PEFT's ``add_weighted_adapter`` with ``combination_type="cat"``: the ranks stacked,
    nothing truncated), in fp32 or, as ``merge_lora``, into the base in ``dtype``."""
    weights = list(weights) if weights is not None else [1.0 / len(adapters)] * len(adapters)
    if len(weights) != len(adapters) or len(adapters) < 2:
        raise ValueError(f"merge_folds: {len(adapters)} adapters and {len(weights)} weights; two or more "
                         "adapters, one weight each")
    missing = [a for a in adapters if a not in getattr(model, "peft_config", {})]
    if missing:
        raise ValueError(f"adapters {missing} are not loaded on the model (model.load_adapter(folder, name))")
    model.add_weighted_adapter(adapters, weights, "folds", combination_type="cat")
    model.set_adapter("folds")
    for name in adapters:
        model.delete_adapter(name)
    return merge_lora(model, dtype)


def save_fp16(model, tokenizer, folder: Path | str, dtype: torch.dtype = torch.float16) -> Path:
    """The model in fp16 (or ``dtype``) and its tokenizer as a transformers folder (config.json,
    safetensors shards of at most ``SHARD_SIZE``: what a Kaggle Model version holds), written
    whole or not at all."""
    folder = Path(folder)
    with atomic.atomic_folder(folder) as partial:
        model.to(dtype).save_pretrained(partial, max_shard_size=SHARD_SIZE)
        tokenizer.save_pretrained(partial)
    return folder


@dataclass
class OverflowReport:
    largest: dict[str, float] = field(default_factory=dict)  # module -> its largest |output|
    margin: float = 0.25  # flagged past this fraction of fp16's range (headroom for other inputs)

    @property
    def flagged(self) -> dict[str, float]:
        return {m: v for m, v in self.largest.items() if v > self.margin * FP16_MAX or v != v}

    def describe(self) -> str:
        if not self.flagged:
            peak = max(self.largest.values(), default=0.0)
            return f"no overflow risk in fp16: largest activation {peak:.4g} (fp16 holds {FP16_MAX:g})"
        worst = sorted(self.flagged.items(), key=lambda kv: -kv[1])[:3]
        return ("fp16 overflow risk: " + "; ".join(f"{m} reaches {v:.4g}" for m, v in worst)
                + f" (fp16 holds {FP16_MAX:g}): run these in fp32 or scale them down before a T4 rerun")


@torch.no_grad()  # not inference_mode: the weights it lends back must stay usable for training
def overflow_scan(model, batches, margin: float = 0.25) -> OverflowReport:
    """Each module's largest |output| over ``batches`` (dicts of the model's inputs), computed in
    fp32 whatever the weights are held in (``in_fp32``): a 16-bit model is scanned as saved."""
    report, hooks = OverflowReport(margin=margin), []

    def watch(name):
        def hook(_module, _inputs, output):
            tensor = output[0] if isinstance(output, tuple) else output
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                report.largest[name] = max(report.largest.get(name, 0.0), float(tensor.abs().max()))
        return hook
    for name, module in model.named_modules():
        if name:
            hooks.append(module.register_forward_hook(watch(name)))
    try:
        model.eval()
        with in_fp32(model):
            for batch in batches:
                model(**batch)
    finally:
        for h in hooks:
            h.remove()
    return report


@contextlib.contextmanager
def in_fp32(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` computes in fp32 while its weights stay in their own type: each module's own
    floating parameters and buffers are lent an fp32 copy for its forward and given back after it,
    so one layer's fp32 copy is alive at a time (a 7B fp16 model scanned in its 14 GB, not 28)."""
    lent: dict[int, list] = {}

    def lend(module, args, kwargs):
        tensors = [t for t in (*module.parameters(recurse=False), *module.buffers(recurse=False))
                   if t.is_floating_point() and t.dtype != torch.float32]
        lent[id(module)] = [(t, t.data) for t in tensors]
        for t in tensors:
            t.data = t.data.float()
        # an input the model cast to its weights' type (T5's ``.to(self.wo.weight.dtype)``) computes in fp32 too
        return tuple(map(_fp32, args)), {k: _fp32(v) for k, v in kwargs.items()}

    def give_back(module, _inputs, _output):
        for t, own in lent.pop(id(module), []):
            t.data = own  # the very tensor it held: nothing rounded twice
    owners = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None
              or next(m.buffers(recurse=False), None) is not None]
    hooks = [h for m in owners
             for h in (m.register_forward_pre_hook(lend, with_kwargs=True), m.register_forward_hook(give_back))]
    try:
        yield model
    finally:
        for h in hooks:
            h.remove()
        for pairs in lent.values():  # a forward that raised midway
            for t, own in pairs:
                t.data = own


def _fp32(value):
    return value.float() if isinstance(value, torch.Tensor) and value.is_floating_point() else value
