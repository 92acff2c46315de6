"""A model exported for a CPU-only rerun (kagglekit/submit/export.py): ONNX Runtime computes what
torch does on another batch size than the export's, both are timed, the faster is kept, and an
export that computes something else is refused."""
import re

import numpy as np
import pytest
import torch

import kagglekit as kk
from kagglekit.submit import export, rerunplan


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 5)).eval()


def test_the_export_computes_what_torch_does_and_the_faster_runtime_is_chosen(tmp_path, capsys):
    model, batch = _cnn(), torch.randn(8, 3, 32, 32)
    done = export.export(model, batch, tmp_path, threads=2, repeats=3)
    assert done.path.exists() and done.largest_diff < 1e-4
    assert set(done.rates) == {"torch", "onnxruntime", "openvino"}  # OpenVINO (in the venv) checked, then timed
    assert done.chosen == max(done.rates, key=done.rates.get)
    runs = export.session(done.path, 1)
    other = torch.randn(3, 3, 32, 32)  # a batch size the export never saw
    with torch.inference_mode():
        assert np.abs(runs.run(None, {"x": other.numpy()})[0] - model(other).numpy()).max() < 1e-4
    assert "largest difference from torch" in capsys.readouterr().out and done.chosen in done.describe()
    plan = rerunplan.plan([done.planned("predict", rerun_rows=100_000)], hours=9)
    assert plan["units"][0]["seconds"] == pytest.approx(100_000 / done.rates[done.chosen], rel=0.01)


def test_an_export_that_computes_something_else_is_refused(tmp_path, monkeypatch):
    model, batch = _cnn(), torch.randn(4, 3, 32, 32)
    real = export.session

    class Off:  # a runtime whose outputs are off by 0.01, what a mis-mapped op gives
        def __init__(self, path, threads):
            self.inner = real(path, threads)

        def run(self, names, feeds):
            return [out + 0.01 for out in self.inner.run(names, feeds)]
    monkeypatch.setattr(export, "session", Off)
    with pytest.raises(export.ExportError, match="differ from torch's by 0.01"):
        export.export(model, batch, tmp_path, threads=1)
    with pytest.raises(export.ExportError, match="one input tensor"):
        export.to_onnx(model, [batch], tmp_path / "m.onnx")
    assert kk.export is export


def test_openvino_is_timed_only_when_it_computes_what_torch_does(tmp_path, monkeypatch, capsys):
    model, batch = _cnn(), torch.randn(4, 3, 32, 32)
    real = export._openvino
    monkeypatch.setattr(export, "_openvino", lambda path, threads: (lambda x, f=real(path, threads): f(x) + 0.01))
    done = export.export(model, batch, tmp_path, threads=1, repeats=1)
    assert set(done.rates) == {"torch", "onnxruntime"}  # OpenVINO refused, never chosen
    assert re.search(r"OpenVINO's outputs differ from torch's by 0\.01\d*: not used", capsys.readouterr().out)


def test_a_model_openvino_cannot_convert_is_exported_for_the_others(tmp_path, capsys):
    """OpenVINO 2026.4 converts no STFT over a free batch size (the audio notebook's spectrogram):
    said, left out, and ONNX Runtime and torch still timed."""
    model = torch.nn.Sequential(kk.mel.LogMel(n_fft=256, hop=256, n_mels=16), torch.nn.Flatten(),
                                torch.nn.LazyLinear(3)).eval()
    batch = torch.randn(4, 8000) * 0.1
    model(batch)
    done = export.export(model, batch, tmp_path, threads=1, repeats=1)
    assert set(done.rates) == {"torch", "onnxruntime"} and done.largest_diff < 1e-4
    assert "OpenVINO cannot run model.onnx (-- Conversion is failed for: ReduceL2-20, STFT-20): not used" \
        in capsys.readouterr().out
