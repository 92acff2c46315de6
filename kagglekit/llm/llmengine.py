"""An LLM at inference, one engine per GPU: ``kk.llmengine.infer(run, "judge", model_dir, prompts,
Task.answers(token_ids))``.

The prompts are cut into shards by token count (``llmshards``), each shard a unit of work (its
key: the model's identity, the task, the shard's prompts and the backend's code), so a finished
shard is written atomically as it finishes (the run's cache) and no later run or kernel version
computes it again. The shards are shared out over one worker process per GPU, each loading the
model whole on its card (``run.workpool``: both T4s, each its own engine; without a GPU, this
process), the longest shards first. A shard starts only when the session's time holds it,
estimated from the seconds per token of the shards computed so far. What it leaves: each
prompt's output, None for a prompt whose shard is left for the next version, and the measured
tokens/s (metrics.json ``llm_<name>``) that a scoring rerun's plan is judged by.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..readers.pretrained import base_identity
from ..run import workpool
from ..submit.rerunplan import Planned
from . import hfbackend, llmshards, vllmbackend

_LOADED: dict = {}  # (model folder, device, backend) -> its Loaded: a worker loads its engine once
BACKENDS = ("hf", "vllm")


@dataclass(frozen=True)
class Task:
    """What the engine computes per prompt: ``answers`` (the next token's probabilities over
    ``token_ids``), ``choice`` (the label of the most probable of them) or ``generate``
    (``samples`` completions of at most ``max_new_tokens``, greedy at temperature 0)."""
    mode: str
    token_ids: tuple[int, ...] = ()
    labels: tuple[str, ...] = ()
    max_new_tokens: int = 0
    samples: int = 1
    temperature: float = 0.0
    seed: int = 0

    @classmethod
    def answers(cls, token_ids) -> Task:
        return cls("answers", token_ids=tuple(int(t) for t in token_ids))

    @classmethod
    def choice(cls, token_ids, labels) -> Task:
        if len(token_ids) != len(labels):
            raise ValueError(f"{len(labels)} labels for {len(token_ids)} answer tokens: one token per label")
        return cls("choice", token_ids=tuple(int(t) for t in token_ids), labels=tuple(labels))

    @classmethod
    def generate(cls, max_new_tokens: int, samples: int = 1, temperature: float = 0.0, seed: int = 0) -> Task:
        if max_new_tokens < 1 or samples < 1 or temperature < 0:
            raise ValueError(f"max_new_tokens={max_new_tokens}, samples={samples}, temperature={temperature}: "
                             "at least one token and one sample, a temperature of 0 (greedy) or more")
        if samples > 1 and temperature == 0:
            raise ValueError(f"samples={samples} at temperature 0 would be {samples} copies of the greedy answer: "
                             "sample at a temperature above 0")
        return cls("generate", max_new_tokens=max_new_tokens, samples=samples, temperature=temperature, seed=seed)


@dataclass
class Inferred:
    outputs: list  # per prompt: probabilities, a label, or its samples; None where not done yet
    done: list[int] = field(default_factory=list)  # shards done
    pending: list[int] = field(default_factory=list)  # shards left for the next version
    tokens_per_s: float | None = None  # one engine's, measured on the shards computed this session
    balance: float = 1.0  # the largest shard's tokens over the mean's
    tokens: int = 0  # the prompts' tokens, all shards
    engines: int = 1

    def planned(self, name: str, rerun_tokens: int) -> Planned:
        """This inference in a scoring rerun's plan (``submit.rerunplan``): its time on
        ``rerun_tokens`` prompt tokens (the hidden test's) at the measured tokens/s of its engines."""
        if not self.tokens_per_s:
            raise ValueError(f"{name}: no shard was computed this session, so no tokens/s was measured: "
                             "plan from a run that computed (force_retrain=True)")
        seconds = self.tokens / (self.tokens_per_s * self.engines)
        return Planned(name, seconds, self.tokens, rerun_tokens, trains=False)

    @property
    def complete(self) -> bool:
        return not self.pending


class _ShardJob:
    """One shard on one engine (travels to its worker by value; the model loads there once)."""

    def __init__(self, model_dir: Path | Callable[[], Path], task: Task, prompts: list[str], tokens: int,
                 batch_size: int, backend: str = "hf"):
        self.model_dir, self.task, self.prompts = model_dir, task, prompts  # a folder, or what makes it (here)
        self.tokens, self.batch_size, self.backend = tokens, batch_size, backend

    def __call__(self, threads: int) -> dict:
        import torch
        torch.set_num_threads(threads)
        folder = self.model_dir() if callable(self.model_dir) else self.model_dir
        return run_task(engine(folder, self.backend), self.task, self.prompts, self.batch_size, self.backend)


def _module(backend: str):
    return vllmbackend if backend == "vllm" else hfbackend


def engine(model_dir: Path, backend: str = "hf"):
    """This process's engine for ``model_dir`` on its GPU (a worker sees one, as cuda:0), else the CPU."""
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    key = (str(model_dir), device, backend)
    if key not in _LOADED:
        _LOADED[key] = _module(backend).load(model_dir, device)
    return _LOADED[key]


def run_task(loaded, task: Task, prompts: list[str], batch_size: int, backend: str = "hf") -> dict:
    """One shard's outputs as the cache stores them (tensors, or JSON for texts)."""
    import torch
    module = _module(backend)
    if task.mode in ("answers", "choice"):
        probs = module.answer_probs(loaded, prompts, list(task.token_ids), batch_size)
        return {"probs": torch.from_numpy(np.asarray(probs))}
    texts = module.generate(loaded, prompts, task.max_new_tokens, samples=task.samples,
                            temperature=task.temperature, seed=task.seed, batch_size=batch_size)
    return {"texts": texts}


def choose(backend: str) -> tuple[str, str]:
    """(the backend to use, why): ``auto`` is vLLM where its environment is found, else Hugging Face's."""
    if backend not in (*BACKENDS, "auto"):
        raise ValueError(f"backend={backend!r}: one of {', '.join(BACKENDS)} or auto")
    found, why = vllmbackend.available()
    if backend == "vllm" and not found:
        raise vllmbackend.VllmError(f"backend='vllm': {why}")
    if backend == "auto":
        return ("vllm", why) if found else ("hf", f"{why}: the Hugging Face backend")
    return backend, "asked for"


def infer(run, name: str, model_dir: Path | str | Callable[[], Path], prompts: list[str], task: Task, *,
          batch_size: int = 16, shards_per_engine: int = 8, workers: int | None = None, backend: str = "hf",
          identity: dict | None = None, tokenizer=None) -> Inferred:
    """``task`` over every prompt (see the module): the outputs of the shards done, in prompt order.
    ``backend``: "hf", "vllm" or "auto" (vLLM where its environment is found; the choice said).
    ``model_dir`` a function: the folder is made only when a shard is left to compute (a fold's
    merged model, written at its size, is not made again for shards a killed version finished);
    then ``identity`` names the model it will make and ``tokenizer`` is its tokenizer."""
    backend, why = choose(backend)
    if run.is_main:
        print(f"kagglekit llm: {name}: the {backend} backend ({why})", flush=True)
    if callable(model_dir) and (identity is None or tokenizer is None):
        raise TypeError(f"infer({name!r}): a model_dir made on demand needs identity= and tokenizer=")
    if tokenizer is None:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(Path(model_dir), local_files_only=True)  # type: ignore[arg-type]
    sizes = hfbackend.lengths(tokenizer, prompts)
    engines = workers or workpool.processes()
    shards = llmshards.for_engines(sizes, engines, shards_per_engine)
    model = identity or base_identity(model_dir)  # type: ignore[arg-type]  # a model made on demand came with identity=
    identity = {"model": model, "task": asdict(task), "backend": backend}
    module = _module(backend)
    texts = [[prompts[i] for i in shard.rows] for shard in shards]
    units = [run.unit(f"{name}-shard{shard.index}", config=identity, data=shard_texts,
                      code=[run_task, module.answer_probs, module.generate, module.load])
             for shard, shard_texts in zip(shards, texts)]
    if callable(model_dir):  # made before the workers if a shard is left; else only if a stored one is unreadable
        make = functools.cache(model_dir)
        model_dir = make() if any(not unit.done for unit in units) else make
    jobs = [(unit, _ShardJob(model_dir if callable(model_dir) else Path(model_dir), task, shard_texts, shard.tokens,
                             batch_size, backend)) for unit, shard, shard_texts in zip(units, shards, texts)]
    results = workpool.share(run, jobs, workers=engines, size=lambda unit, job: job.tokens)
    return _assemble(run, name, task, shards, jobs, results, engines)


def _assemble(run, name: str, task: Task, shards, jobs, results: dict, engines: int) -> Inferred:
    outputs: list = [None] * sum(len(s.rows) for s in shards)
    done, pending = [], []
    for shard, (unit, _) in zip(shards, jobs):
        value = results.get(unit.name)
        if value is None:
            pending.append(shard.index)
            continue
        done.append(shard.index)
        for row, out in zip(shard.rows, _per_prompt(task, value)):
            outputs[row] = out
    computed = {e["name"]: e for e in run.cache.events if not e.get("hit") and e["name"].startswith(f"{name}-shard")}
    tokens = sum(job.tokens for unit, job in jobs if unit.name in computed)
    seconds = sum(e.get("seconds", 0.0) for e in computed.values())
    rate = round(tokens / seconds, 1) if seconds > 0 else None
    result = Inferred(outputs, sorted(done), sorted(pending), rate, round(llmshards.balance(shards), 3),
                      sum(s.tokens for s in shards), engines)
    run.log(**{f"llm_{name}": {"shards": len(shards), "done": result.done, "pending": result.pending,
                               "tokens_per_s": rate, "balance": result.balance, "mode": task.mode,
                               "backend": jobs[0][1].backend if jobs else ""}})
    if pending:
        print(f"kagglekit llm: {name}: {len(done)} of {len(shards)} shards done, {len(pending)} next version")
    return result


def _per_prompt(task: Task, value: dict) -> list:
    if task.mode == "generate":
        return list(value["texts"])
    probs = np.asarray(value["probs"])
    if task.mode == "answers":
        return list(probs)
    return [task.labels[int(i)] for i in probs.argmax(1)]
