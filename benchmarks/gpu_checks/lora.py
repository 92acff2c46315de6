"""The LoRA fine-tune of the text pipeline on its stand-in decoder, with either head (a new one, or
its answer tokens), the frozen base in fp16 and fp16 with the GradScaler (as on a T4): no
"Attempting to unscale FP16 gradients" (adapters and head train in fp32); then a NaN loss
injected: the fit rolls back and goes on in fp32, the fp16 base's hidden states still meeting the
fp32 head. Last, the answer-token model as the text notebook's ``engine=hf`` serves it on a T4:
merged into its fp16 base in place, saved in fp16, its probabilities from the engine
against the notebook's own loop under fp16 autocast (both fp16: the CPU's check compared fp32)."""
from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

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
    return result, (model, tokenizer, texts, answers)


def engine_against_loop(model, tokenizer, texts, answers, device, root) -> dict:
    """The largest difference in a probability between the notebook's loop (autocast to the card's
    16 bits) and the hf engine serving the fold merged as ``kk.testpredict.export_fold`` saves it."""
    import numpy as np
    import torch

    import kagglekit as kk
    from kagglekit.llm import hfbackend, llmexport
    autocast = kk.precision.resolve("auto", device).autocast()
    loop = kk.text.predict_proba(model, texts, kk.text.collator(tokenizer), 32, device, autocast)
    dtype = kk.testpredict.engine_dtype()
    merged = llmexport.save_fp16(llmexport.merge_lora(model.lm.cpu(), dtype), tokenizer, f"{root}/merged", dtype)
    engine = hfbackend.answer_probs(hfbackend.load(merged, device), kk.prompts.as_read(tokenizer, texts), answers, 32)
    return {"largest_diff": float(np.abs(engine - loop).max()), "dtype": str(dtype), "rows": len(loop),
            "merged_bytes": sum(f.stat().st_size for f in Path(merged).glob("*.safetensors")),
            "cuda": torch.cuda.is_available()}


def check():
    import torch  # noqa: F401

    from kagglekit.text import textsets
    facts, ok = {}, True
    with tempfile.TemporaryDirectory(prefix="gpu-check-lora-") as root:
        model_dir = textsets.write_standin_model(root, "llama")
        for head in ("sequence", "answer_token"):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                clean, trained = _fit(model_dir, None, head)
            unscale = [str(w.message) for w in seen if "unscale FP16" in str(w.message)]
            fallen, _ = _fit(model_dir, 5, head)
            facts[head] = {"precision": clean.precision, "unscale_warnings": unscale,
                           "nan_run_precision": fallen.precision, "precision_events": fallen.precision_events,
                           "steps": [clean.steps, fallen.steps]}
            ok = ok and clean.precision == "fp16" and not unscale and fallen.precision == "fp32" \
                and bool(fallen.precision_events)
        facts["engine_hf_vs_loop"] = engine_against_loop(*trained, card(), root)  # the answer-token head's
        ok = ok and facts["engine_hf_vs_loop"]["largest_diff"] < 1e-2  # fp16 both: 5e-4 on the CPU (fp16 vs fp32)
    return bool(ok), facts


if __name__ == "__main__":
    main(check)
