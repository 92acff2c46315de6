"""A trained model exported for a CPU-only or tight scoring rerun: ``kk.export.export(model, batch,
folder, threads=4)``.

The model goes to ONNX (torch's exporter, the batch dimension left free), ONNX Runtime runs it,
and its outputs are checked against torch's on the same batch (the largest difference printed;
past ``atol`` the export is refused, never silently used). Then both are timed on the CPU at the
rerun's core count (``threads``: Kaggle's CPU rerun has 4) and the faster is chosen and recorded:
``Exported`` says which, at how many samples/s, and plans its share of the rerun
(``submit.rerunplan``) from that measured rate. OpenVINO (in fp32), where installed, is checked
and timed the same way, and left out when its outputs differ.
``export_all`` does it for a fold's models each: timed once, exported only when torch is not the
faster. ``Exported.runner`` predicts by the chosen runtime. ``record`` is what a unit stores of
it (the files' bytes, the measurements), ``restore`` writes it back: a later version measures
nothing again.
"""
from __future__ import annotations

import contextlib
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..machine.display import headline
from ..state import atomic
from .rerunplan import Planned


class ExportError(ValueError):
    """The model cannot be exported, or its export does not compute what it does."""


@dataclass
class Exported:
    path: Path  # the .onnx file
    largest_diff: float  # against torch, on the checking batch
    rates: dict[str, float] = field(default_factory=dict)  # runtime -> samples/s at ``threads``
    threads: int = 4
    chosen: str = "torch"

    def planned(self, name: str, rerun_rows: int) -> Planned:
        """Predicting ``rerun_rows`` samples in the rerun at the chosen runtime's measured rate."""
        rate = self.rates[self.chosen]
        return Planned(name, 1000 / rate, 1000, rerun_rows, trains=False)

    def runner(self, model: torch.nn.Module):
        """``f(batch as a NumPy array) -> outputs``, by the chosen runtime at ``threads`` (``model``:
        the torch module the export came from, used when torch was the faster)."""
        if self.chosen == "onnxruntime":
            runs = session(self.path, self.threads)
            return lambda x: runs.run(None, {"x": np.ascontiguousarray(x)})[0]
        if self.chosen == "openvino":
            compiled = _openvino(self.path, self.threads)
            if compiled is not None:
                return compiled
        return lambda x: _torch_forward(model, torch.from_numpy(np.ascontiguousarray(x)), self.threads).numpy()

    def headline(self, unit: str = "samples") -> dict:
        """The summary's line: the chosen runtime's rate on the rerun's cores against the other's."""
        others = {k: v for k, v in self.rates.items() if k != self.chosen}
        return headline(f"{unit}/s on {self.threads} CPU cores, {self.chosen} (largest difference from torch "
                        f"{self.largest_diff:.1e})", self.rates[self.chosen],
                        baseline=max(others.values(), default=None), vs=" or ".join(others))

    def describe(self) -> str:
        others = ", ".join(f"{k} {v:,.0f}/s" for k, v in self.rates.items() if k != self.chosen)
        return (f"{self.chosen} chosen at {self.rates[self.chosen]:,.0f} samples/s on {self.threads} threads "
                f"({others}); ONNX against torch: largest difference {self.largest_diff:.2e}")


def to_onnx(model: torch.nn.Module, example: torch.Tensor, path: Path | str) -> Path:
    """``model`` (in eval mode) as an ONNX file, its batch dimension free, written whole or not at all."""
    if not isinstance(example, torch.Tensor):
        raise ExportError(f"the example batch is a {type(example).__name__}: export takes one input tensor "
                          "(a batch of images or spectrograms), on the CPU")
    path = Path(path)
    model = model.eval().cpu()
    batch = torch.export.Dim("batch", min=1)
    with atomic.atomic_path(path) as tmp, _quiet():
        torch.onnx.export(model, (example.cpu(),), tmp, dynamo=True, verbose=False, input_names=["x"],
                          output_names=["y"], dynamic_shapes=({0: batch},), external_data=False)
    return path


def session(path: Path | str, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def export(model: torch.nn.Module, example: torch.Tensor, folder: Path | str, *, threads: int = 4,
           atol: float = 1e-4, repeats: int = 5, name: str = "model") -> Exported:
    """Export, check against torch and time both at ``threads`` (see the module)."""
    path = to_onnx(model, example, Path(folder) / f"{name}.onnx")
    check = torch.cat([example, example[:1]])  # another batch size than the export's
    with torch.inference_mode():
        expected = model(check).numpy()
    runtimes, diff = _checked(path, threads, check.numpy(), expected, atol)
    if repeats == 0:  # checked, not timed (another of export_all's models): the runtimes that passed
        return Exported(path, diff, dict.fromkeys(runtimes, 0.0), threads, "onnxruntime")
    rates = {"torch": _rate(lambda: _torch_forward(model, example, threads), len(example), repeats)}
    for key, run in runtimes.items():
        rates[key] = _rate(lambda run=run: run(example.numpy()), len(example), repeats)
    chosen = max(rates, key=rates.__getitem__)
    return Exported(path, diff, {k: round(v, 1) for k, v in rates.items()}, threads, chosen)


def _checked(path: Path, threads: int, check: np.ndarray, expected: np.ndarray, atol: float) -> tuple[dict, float]:
    """The runtimes whose outputs on ``check`` are within ``atol`` of torch's (``expected``), and
    their largest difference; ONNX Runtime off is an error, OpenVINO off is left out, said."""
    runs = session(path, threads)
    runtimes = {"onnxruntime": lambda x: runs.run(None, {"x": x})[0]}
    openvino = _openvino(path, threads)
    if openvino is not None:
        runtimes["openvino"] = openvino
    diffs = {k: float(np.abs(run(check) - expected).max()) for k, run in runtimes.items()}
    print(f"kagglekit export: {path.name}: largest difference from torch "
          + ", ".join(f"{k} {d:.2e}" for k, d in diffs.items()), flush=True)
    if not diffs["onnxruntime"] <= atol:
        raise ExportError(f"{path}: ONNX Runtime's outputs differ from torch's by {diffs['onnxruntime']:.3g} "
                          f"(> atol={atol}): not used. An op the exporter maps differently (check the model's "
                          "custom layers)")
    if "openvino" in diffs and not diffs["openvino"] <= atol:
        print(f"kagglekit export: OpenVINO's outputs differ from torch's by {diffs['openvino']:.3g}: not used")
        del runtimes["openvino"]
    return runtimes, max(diffs[k] for k in runtimes)


def export_all(models: dict[str, torch.nn.Module], example: torch.Tensor, folder: Path | str, *,
               threads: int = 4, atol: float = 1e-4) -> dict[str, Exported]:
    """Models of one architecture (a fold's each), exported for the rerun: the first exported and
    timed; when torch is the faster, the others stay torch modules (no file to write); else each
    is exported and checked too, and carries the first one's rates and choice."""
    names = list(models)
    first = export(models[names[0]], example, folder, threads=threads, atol=atol, name=names[0])
    out = {names[0]: first}
    for name in names[1:]:
        if first.chosen == "torch":
            out[name] = Exported(first.path, first.largest_diff, first.rates, threads, "torch")  # path unused
        else:
            checked = export(models[name], example, folder, threads=threads, atol=atol, repeats=0, name=name)
            chosen = first.chosen if first.chosen in checked.rates else "onnxruntime"  # OpenVINO off on this one
            out[name] = Exported(checked.path, checked.largest_diff, first.rates, threads, chosen)
    return out


def record(exported: dict[str, Exported]) -> dict:
    """``export_all``'s result as a unit stores it (tensors and plain values: loaded with
    ``weights_only``): each model's ONNX file as bytes, its difference, the rates and the choice."""
    files = {p.name: torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8)
             for p in {e.path for e in exported.values()} if p.exists()}
    return {"files": files, "models": {name: {"file": e.path.name, "largest_diff": e.largest_diff, "rates": e.rates,
                                              "threads": e.threads, "chosen": e.chosen}
                                       for name, e in exported.items()}}


def restore(stored: dict, folder: Path | str) -> dict[str, Exported]:
    """``record``'s export back in ``folder`` (its files rewritten only where missing or changed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in stored["files"].items():
        content = data.numpy().tobytes()
        if not (folder / name).exists() or (folder / name).read_bytes() != content:
            with atomic.atomic_path(folder / name) as tmp:
                tmp.write_bytes(content)
    return {name: Exported(folder / m["file"], m["largest_diff"], m["rates"], m["threads"], m["chosen"])
            for name, m in stored["models"].items()}


def _torch_forward(model, batch, threads: int):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            return model(batch)
    finally:
        torch.set_num_threads(before)


def _rate(forward, samples: int, repeats: int) -> float:
    """Samples/s: the median of ``repeats`` timed calls after one warm-up."""
    forward()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        forward()
        times.append(time.perf_counter() - started)
    return samples / float(np.median(times))


def _openvino(path: Path, threads: int):
    try:
        import openvino as ov
    except ImportError:
        return None
    try:  # f32: on a CPU with bf16 units OpenVINO computes in bf16 by default (3.8e-4 off torch on a small CNN)
        compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                              "INFERENCE_PRECISION_HINT": "f32"})
    except RuntimeError as err:  # an op it cannot convert (an STFT over a free batch size, in 2026.4): not used
        failed = [line.strip() for line in str(err).splitlines() if "Conversion is failed for" in line]
        print(f"kagglekit export: OpenVINO cannot run {path.name} ({(failed or ['compile failed'])[0]}): not used")
        return None
    return lambda x: np.asarray(compiled(x)[0])


@contextlib.contextmanager
def _quiet():
    """The exporter's progress lines, its torchvision notes and torch's deprecations met inside it
    carry nothing for the user."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(None), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations, met inside the exporter
            yield
    finally:
        logger.setLevel(level)
