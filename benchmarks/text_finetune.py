"""LoRA fine-tuning through the kit's fit against a plain transformers + peft loop.

The same stand-in model (a BERT of a real architecture with random weights, text.textsets),
the same length-grouped batches padded to their longest, AdamW and warm-up then linear decay:
only the loop differs. Interleaved repeats in ABBA order; prints the tokens/s (real tokens,
padding not counted) of each, the median of the paired ratios (goal >= 0.97), then what a
checkpoint weighs with only what trains against the whole model, and the share of padding with
length-grouped batches against random ones.
"""
from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import get_linear_schedule_with_warmup

import kagglekit as kk
from kagglekit.state import snapshot


def plain_loop(model, optimizer, scheduler, loader) -> None:
    model.train()
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)


def kit_loop(model, optimizer, scheduler, loader) -> None:
    kk.fit(model, optimizer, loader, lambda m, b: m(**b).loss, run=kk.Alone(time_budget=None), epochs=1,
           scheduler=scheduler, clip_grad_norm=1.0, checkpoints=None, save_every_min=None, progress=False)


def _parts(folder: Path, loader, lora_r: int):
    torch.manual_seed(0)
    model, _ = kk.text.load_classifier(folder, 2, lora_r=lora_r)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    steps = len(loader)
    return model, optimizer, get_linear_schedule_with_warmup(optimizer, steps // 10, steps)


def _bytes(state: dict) -> int:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.tell()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--texts", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lora-r", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)  # a steadier measurement on a small shared machine
    folder = kk.textsets.write_standin_model(Path(tempfile.gettempdir()) / "kagglekit-bench-models", "bert",
                                             hidden=args.hidden, layers=4)
    tokenizer = kk.text.load_tokenizer(folder)
    rows = kk.textsets.texts(args.texts, seed=0, max_words=60)
    texts = kk.text.TokenizedTexts(tokenizer, [t for t, _ in rows], 96, [y for _, y in rows])
    collate = kk.text.collator(tokenizer)
    loader = kk.make_loader(texts, args.batch, seed=0, num_workers=0, collate_fn=collate, lengths=texts.lengths)
    # real tokens of an epoch (the same texts every epoch, the partial batch aside): counted once
    tokens = sum(int(b["attention_mask"].sum()) for b in loader)
    rates = {"plain": [], "kit": []}
    order = [("plain", plain_loop), ("kit", kit_loop)]
    plain_loop(*_parts(folder, loader, args.lora_r), loader)  # warm-up
    for repeat in range(args.repeats):
        for name, fn in (order if repeat % 2 == 0 else order[::-1]):
            parts = _parts(folder, loader, args.lora_r)
            started = time.perf_counter()
            fn(*parts, loader)
            rates[name].append(tokens / (time.perf_counter() - started))
    paired = sorted(k / p for k, p in zip(rates["kit"], rates["plain"]))
    q = statistics.quantiles(paired, n=4)
    print(f"stand-in BERT hidden {args.hidden}, 4 layers, LoRA r={args.lora_r}; {len(loader)} steps of "
          f"{args.batch} texts per repeat, {args.repeats} interleaved repeats, CPU, 1 thread")
    print(f"plain transformers + peft loop: {statistics.median(rates['plain']):8.0f} tokens/s (median)")
    print(f"kagglekit fit                 : {statistics.median(rates['kit']):8.0f} tokens/s (median)")
    print(f"paired ratios kit / plain     : median {statistics.median(paired):.3f} (goal >= 0.97), "
          f"quartiles {q[0]:.3f}-{q[2]:.3f}")
    model, optimizer, scheduler = _parts(folder, loader, args.lora_r)
    plain_loop(model, optimizer, scheduler, loader)
    trainable = _bytes(snapshot.snapshot(model, optimizer, scheduler, frozen=False))
    whole = _bytes(snapshot.snapshot(model, optimizer, scheduler, frozen=True))
    print(f"checkpoint, what trains only  : {trainable / 2**20:8.2f} MiB; the whole model: "
          f"{whole / 2**20:.2f} MiB (ratio {trainable / whole:.3f}); base weights "
          f"{kk.pretrained.weight_bytes(folder) / 2**20:.2f} MiB")
    random = kk.make_loader(texts, args.batch, seed=0, num_workers=0, collate_fn=collate)
    print(f"padding share                 : {kk.text.pad_share(loader):.3f} length-grouped, "
          f"{kk.text.pad_share(random):.3f} random batches")


if __name__ == "__main__":
    main()
