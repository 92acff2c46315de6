"""The LoRA fine-tune of the text pipeline on its stand-in decoder, with either head (a new one, or
its answer tokens), the frozen base in fp16 and fp16 with the GradScaler (as on a T4): no
"Attempting to unscale FP16 gradients" (adapters and head train in fp32); then a NaN loss
injected: the fit rolls back and goes on in fp32, the fp16 base's hidden states still meeting the
fp32 head."""
from __future__ import annotations

import os
import tempfile
import warnings

from common import card, main

os.environ["KAGGLEKIT_AS"] = "t4"


def _fit(model_dir, nan_at: int | None, head: str = "sequence"):
    import torch

    import kagglekit as kk
    from kagglekit.text import textsets
    torch.manual_seed(0)
    answers = kk.answerhead.answer_token_ids(kk.text.load_tokenizer(model_dir), [0, 1], "no,yes")
    model, tokenizer = kk.text.load_classifier(model_dir, 2, head=head, answer_ids=answers, lora_r=8, device=card(),
                                               precision=kk.precision.resolve("auto", card()))
    model.to(card())
    rows = textsets.texts(256, seed=0)
    texts = kk.text.TokenizedTexts(tokenizer, [t for t, _ in rows], 64, [y % 2 for _, y in rows])
    loader = kk.make_loader(texts, 16, num_workers=0, collate_fn=kk.text.collator(tokenizer), device=card())
    calls = {"n": 0}

    def loss_fn(m, batch):
        calls["n"] += 1
        loss = m(**batch).loss
        return loss * float("nan") if calls["n"] == nan_at else loss
    result = kk.fit(model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4), loader,
                    loss_fn, run=kk.Alone(device=card()), epochs=1, max_steps=24, progress=False,
                    monitor=kk.Monitor(gpu=False))
    return result


def check():
    import torch  # noqa: F401

    from kagglekit.text import textsets
    facts, ok = {}, True
    with tempfile.TemporaryDirectory(prefix="gpu-check-lora-") as root:
        model_dir = textsets.write_standin_model(root, "llama")
        for head in ("sequence", "answer_token"):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                clean = _fit(model_dir, None, head)
            unscale = [str(w.message) for w in seen if "unscale FP16" in str(w.message)]
            fallen = _fit(model_dir, 5, head)
            facts[head] = {"precision": clean.precision, "unscale_warnings": unscale,
                           "nan_run_precision": fallen.precision, "precision_events": fallen.precision_events,
                           "steps": [clean.steps, fallen.steps]}
            ok = ok and clean.precision == "fp16" and not unscale and fallen.precision == "fp32" \
                and bool(fallen.precision_events)
    return bool(ok), facts


if __name__ == "__main__":
    main(check)
