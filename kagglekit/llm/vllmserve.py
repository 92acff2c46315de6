"""One vLLM engine as a process of its own, run by the vLLM environment's Python (never imported by
the kit: that environment has vLLM's transformers, not the kit's). ``llm/vllmbackend.py`` starts it
from a clean process, one per GPU, and talks to it in JSON lines:

    python vllmserve.py <model folder> '<LLM(**settings) as JSON>'
    -> KKJSON {"ready": true, "vllm": "<version>"}
    <- {"op": "answers", "prompts": [...], "token_ids": [...]}
    -> KKJSON {"logprobs": [[...], ...]}       each prompt's next token over token_ids alone
    <- {"op": "generate", "prompts": [...], "max_new_tokens": n, "samples": k, "temperature": t, "seed": s}
    -> KKJSON {"token_ids": [[[...], ...], ...]}   each prompt's samples, as token ids

Answer probabilities: the next token restricted to the answer tokens (``allowed_token_ids``) with the
engine's ``logprobs_mode="processed_logprobs"``, so the log-probabilities returned are over the answer
tokens alone, as the Hugging Face backend's softmax over their logits. Generations come back as token
ids, decoded by the kit as the Hugging Face backend decodes (vLLM's incremental detokenizer keeps a
leading space the other drops). Replies carry a marker: vLLM and its libraries print to stdout too.
"""
import json
import sys

MARK = "KKJSON "


def _reply(value) -> None:
    sys.stdout.write(MARK + json.dumps(value) + "\n")
    sys.stdout.flush()


def _answers(llm, request) -> dict:
    from vllm import SamplingParams
    tokens = [int(t) for t in request["token_ids"]]
    params = SamplingParams(max_tokens=1, temperature=0.0, allowed_token_ids=tokens, logprobs=len(tokens))
    out = []
    for result in llm.generate(request["prompts"], params, use_tqdm=False):
        logprobs = result.outputs[0].logprobs[0]  # token id -> Logprob, over the allowed tokens
        out.append([float(logprobs[t].logprob) if t in logprobs else float("-inf") for t in tokens])
    return {"logprobs": out}


def _generate(llm, request) -> dict:
    from vllm import SamplingParams
    greedy = float(request["temperature"]) == 0.0
    params = SamplingParams(n=int(request["samples"]), max_tokens=int(request["max_new_tokens"]),
                            temperature=0.0 if greedy else float(request["temperature"]),
                            seed=None if greedy else int(request["seed"]))
    outputs = llm.generate(request["prompts"], params, use_tqdm=False)
    return {"token_ids": [[list(o.token_ids) for o in r.outputs] for r in outputs]}


def main() -> None:
    import vllm
    model, settings = sys.argv[1], json.loads(sys.argv[2])
    llm = vllm.LLM(model=model, logprobs_mode="processed_logprobs", **settings)
    _reply({"ready": True, "vllm": vllm.__version__})
    for line in sys.stdin:  # until "stop", or the end of stdin: the kit's worker ended
        request = json.loads(line)
        if request["op"] == "stop":
            break
        try:
            _reply(_answers(llm, request) if request["op"] == "answers" else _generate(llm, request))
        except Exception as error:  # noqa: BLE001 (said to the kit, which raises it with the engine's words)
            _reply({"error": f"{type(error).__name__}: {error}"})
    # the engine's processes stopped now, while this one is whole: left to vLLM's finalizers at exit, they are
    # killed with a warning each, written to pipes whose readers have gone (a traceback per line on screen)
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":  # vLLM starts processes of its own: the engine only in the main one
    main()
