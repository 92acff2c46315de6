"""A trained LoRA model made ready for inference: its adapters merged into the base (exact in
fp32; a fold's each summed into one, ``merge_folds``), saved in fp16 as a plain transformers folder
the engines load, after an fp16 overflow scan. ``llmquant`` quantises it and judges the result.

A T4 computes in fp16, whose largest value is 65504: a model trained or merged in fp32 or bf16 can
hold activations past it (outlier features in the residual stream of larger LMs), which turn to
inf on the T4 and NaN after the next norm, while the A100 that trained it saw nothing wrong.
``overflow_scan`` runs the model in fp32 on the unit's own prompts and reports each module's
largest output against fp16's range, so a model that would overflow is caught before a rerun.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..state import atomic

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504


def merge_lora(model, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """``model`` (a peft model) with its adapters folded into the base weights, in fp32: the
    merged model computes what the adapted one did (PEFT's ``merge_and_unload``).

    ``dtype``: the merged model in that type instead, the base cast to it first (a T4's fp16 base
    already is). Each update is computed from fp32 adapters and PEFT adds it into the base weight in
    place, in fp32, rounded once: equal to the fp32 merge cast to ``dtype``, with one layer's update
    alive at a time. A 7B base held in fp16 merges in its 14 GB, where the whole model in fp32 needs
    28 GB (a Kaggle kernel has 29)."""
    if not hasattr(model, "merge_and_unload"):
        raise TypeError(f"{type(model).__name__} has no LoRA adapters to merge (a peft model has)")
    if dtype is None or dtype == torch.float32:
        return model.float().merge_and_unload()
    for name, p in model.named_parameters():  # the adapters (a few MB) in fp32: their update is not rounded first
        p.data = p.data.float() if "lora_" in name else p.data.to(dtype)
    return model.merge_and_unload().to(dtype)  # what is not a parameter (buffers) in dtype too


def merge_folds(model, adapters: list[str], weights: list[float] | None = None) -> torch.nn.Module:
    """The LoRA adapters ``adapters`` of one base (a fold's each, loaded with ``load_adapter``)
    merged into it as one model: their updates summed with ``weights`` (default: the mean),
    exactly (PEFT's ``add_weighted_adapter`` with ``combination_type="cat"``: the ranks stacked,
    nothing truncated), in fp32."""
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
    return merge_lora(model)


def save_fp16(model, tokenizer, folder: Path | str, dtype: torch.dtype = torch.float16) -> Path:
    """The model in fp16 (or ``dtype``) and its tokenizer as a transformers folder (config.json,
    model.safetensors: what a Kaggle Model version holds), written whole or not at all."""
    folder = Path(folder)
    with atomic.atomic_folder(folder) as partial:
        model.to(dtype).save_pretrained(partial)
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


@torch.inference_mode()
def overflow_scan(model, batches, margin: float = 0.25) -> OverflowReport:
    """Each module's largest |output| over ``batches`` (dicts of the model's inputs), the model
    run in fp32."""
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
        model.float().eval()
        for batch in batches:
            model(**batch)
    finally:
        for h in hooks:
            h.remove()
    return report
