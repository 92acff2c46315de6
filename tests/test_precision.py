import pytest
import torch

from kagglekit import env, precision
from kagglekit.machine.precision import PrecisionError


def test_ampere_and_newer_get_bf16_without_scaler():
    p = precision.choose("auto", (8, 0), "NVIDIA A100")
    assert (p.name, p.dtype, p.needs_scaler) == ("bf16", torch.bfloat16, False)


def test_t4_gets_fp16_with_grad_scaler():
    p = precision.choose("auto", (7, 5), "Tesla T4")
    assert (p.name, p.dtype, p.needs_scaler) == ("fp16", torch.float16, True)


def test_bf16_on_t4_is_refused_even_though_torch_emulates_it():
    with pytest.raises(PrecisionError, match=r"Tesla T4.*7\.5.*emulation.*fp16"):
        precision.choose("bf16", (7, 5), "Tesla T4")


def test_p100_is_refused_with_the_fix():
    with pytest.raises(PrecisionError, match=r"6\.0.*T4 x2"):
        precision.choose("auto", (6, 0), "Tesla P100-PCIE-16GB")


def test_cpu_trains_in_fp32_and_refuses_fp16():
    assert precision.choose("auto", None).name == "fp32"
    assert precision.choose("bf16", None).name == "bf16"
    with pytest.raises(PrecisionError, match="needs a CUDA GPU"):
        precision.choose("fp16", None)


def test_explicit_choices_on_a_modern_card_and_typos():
    assert precision.choose("fp16", (9, 0)).needs_scaler
    assert precision.choose("fp32", (9, 0)).dtype is None
    with pytest.raises(PrecisionError, match="'fp61'"):
        precision.choose("fp61", (9, 0))


def test_scaler_is_enabled_only_for_fp16():
    assert not precision.Amp(precision.choose("auto", None)).scaler.is_enabled()  # CPU: fp32
    t4, a100 = precision.choose("auto", (7, 5)), precision.choose("auto", (8, 0))
    assert t4.needs_scaler and not a100.needs_scaler  # fp16 on a T4, bf16 on Ampere
    # The scaler follows the choice (built for the CPU here: a CUDA one disables itself
    # on a machine without CUDA, which would hide a wrong choice).
    assert precision.Amp(precision.Precision("fp16", "cpu")).scaler.is_enabled()
    assert not precision.Amp(precision.Precision("bf16", "cpu")).scaler.is_enabled()
    assert not precision.Amp(precision.Precision("fp32", "cpu")).scaler.is_enabled()


def test_report_on_simulated_t4x2_picks_fp16_without_touching_cuda(monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_FAKE_GPUS", "Tesla T4:7.5:15,Tesla T4:7.5:15")
    report = env.describe_machine(verbose=False)
    assert report.precision.name == "fp16"
    assert [g["name"] for g in report.as_dict()["gpus"]] == ["Tesla T4", "Tesla T4"]
    assert not torch.cuda.is_initialized()  # a fork-based launch must stay possible


def test_report_refuses_bf16_on_simulated_t4(monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_FAKE_GPUS", "Tesla T4:7.5:15")
    with pytest.raises(PrecisionError, match="bf16"):
        env.describe_machine("bf16", verbose=False)
