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


def test_a_stored_export_comes_back_as_it_was_measured_and_runs_from_its_files(tmp_path, monkeypatch):
    """What a unit keeps of ``export_all`` (files as bytes, rates, choice) restored in another
    version's output: the same files byte for byte, the same measurements, and the chosen
    runtime predicting what the model does; nothing timed again."""
    torch.manual_seed(0)
    models, batch = {"fold0": _cnn(), "fold1": _cnn()}, torch.randn(8, 3, 32, 32)
    rates = iter([1.0, 10.0, 1.0])  # torch, ONNX Runtime, OpenVINO: ONNX Runtime the faster
    monkeypatch.setattr(export, "_rate", lambda forward, samples, repeats: next(rates))
    done = export.export_all(models, batch, tmp_path / "v1", threads=1)
    stored = export.record(done)
    torch.save(stored, tmp_path / "unit.pt")  # as the cache stores it, loaded as it loads it
    back = export.restore(torch.load(tmp_path / "unit.pt", weights_only=True), tmp_path / "v2")
    assert set(back) == {"fold0", "fold1"} and all(back[k].chosen == "onnxruntime" for k in back)
    for name, exported in back.items():
        assert exported.path.read_bytes() == done[name].path.read_bytes() and exported.path.parent == tmp_path / "v2"
        assert (exported.rates, exported.largest_diff) == (done[name].rates, done[name].largest_diff)
        with torch.inference_mode():
            expected = models[name](batch).numpy()
        assert np.abs(exported.runner(models[name])(batch.numpy()) - expected).max() < 1e-4
