"""Scoring tokens/s of a decoder classifier on one device against its layers split over two.

``placement="split"`` (``text.classifier.load_classifier``) spreads a model one T4 cannot hold over both
cards with accelerate's device map: the halves run one after the other (naive model parallelism,
no pipelining), so the split buys memory, not speed; what it costs is the hooks that move each
layer's activations to the next card, and the copy over PCIe.

With two CUDA GPUs this measures exactly that: ``placement="split"`` against the same model on
one card. Elsewhere (the CPU stand-in) the same model is dispatched with accelerate's device map
over two halves that both live on the CPU, hooks forced on: the hooks' cost without the copy.
The stand-in is a Llama of a real architecture with random weights (``text.textsets``), its
tokenizer without a padding token. Interleaved repeats in ABBA order; prints tokens/s (real
tokens, padding not counted) of each and the median of the paired ratios (split / one).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from kagglekit.text import classifier as text, textsets


def _device_map(model) -> dict:
    """The decoder's blocks in two halves, the embeddings with the first and the head with the last."""
    layers = len(model.model.layers)
    first = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu",
             **{f"model.layers.{i}": "cpu" for i in range(layers // 2)}}
    return {**first, **{f"model.layers.{i}": "cpu" for i in range(layers // 2, layers)},
            "model.norm": "cpu", "score": "cpu"}


def _models(model_dir: Path, device: torch.device):
    """(one device, split over two, tokenizer, the split's description)."""
    one, tokenizer = text.load_classifier(model_dir, 2, device=device)
    one.to(device)
    if torch.cuda.device_count() >= 2:
        split, _ = text.load_classifier(model_dir, 2, placement="split", device=device)
        split.load_state_dict(one.state_dict())  # the same (freshly drawn) head in both
        return one, split, tokenizer, f"placement='split' over {torch.cuda.device_count()} GPUs"
    import copy

    from accelerate import dispatch_model
    split = dispatch_model(copy.deepcopy(one), _device_map(one), force_hooks=True)
    return one, split, tokenizer, "CPU stand-in: accelerate's device map, two halves on the CPU, hooks forced on"


def _tokens_per_s(model, texts, collate, batch_size: int, device) -> float:
    started = time.perf_counter()
    with torch.inference_mode():
        text.predict_proba(model, texts, collate, batch_size, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return float(sum(texts.lengths)) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(min(4, torch.get_num_threads()))
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = textsets.write_standin_model(Path(tmp), "llama", hidden=args.hidden, layers=args.layers)
        one, split, tokenizer, how = _models(model_dir, device)
        texts = text.TokenizedTexts(tokenizer, [t for t, _ in textsets.texts(args.texts, seed=1)], max_length=128)
        collate = text.collator(tokenizer)
        with torch.inference_mode():  # the split computes what the whole computes
            differs = abs(text.predict_proba(one, texts, collate, args.batch_size, device)
                          - text.predict_proba(split, texts, collate, args.batch_size, device)).max()
        assert differs < 1e-4, f"the split's probabilities differ from the whole model's by {differs}"
        ratios, rates = [], {"one": [], "split": []}
        for _ in range(args.repeats):  # ABBA: drift in the machine's speed falls on both alike
            a1 = _tokens_per_s(one, texts, collate, args.batch_size, device)
            b1 = _tokens_per_s(split, texts, collate, args.batch_size, device)
            b2 = _tokens_per_s(split, texts, collate, args.batch_size, device)
            a2 = _tokens_per_s(one, texts, collate, args.batch_size, device)
            rates["one"] += [a1, a2]
            rates["split"] += [b1, b2]
            ratios.append((b1 + b2) / (a1 + a2))
    print(f"{how}; {args.texts} texts, Llama stand-in h{args.hidden} x {args.layers} layers, batches of "
          f"{args.batch_size}, {device}")
    print(f"probabilities equal to {differs:.1e}; one device: {statistics.median(rates['one']):,.0f} tokens/s; split: "
          f"{statistics.median(rates['split']):,.0f} tokens/s; split / one = {statistics.median(ratios):.3f} "
          f"(median of {args.repeats} ABBA pairs)")


if __name__ == "__main__":
    main()
