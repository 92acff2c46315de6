import pytest
import torch

import kagglekit as kk
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
    assert not torch.cuda.is_initialized()  # asking costs the notebook's process no GPU memory


def test_report_refuses_bf16_on_simulated_t4(monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_FAKE_GPUS", "Tesla T4:7.5:15")
    with pytest.raises(PrecisionError, match="bf16"):
        env.describe_machine("bf16", verbose=False)


def test_the_emulated_t4x2_decides_as_two_t4s_and_computes_fp16_on_the_cpu(monkeypatch, half_kernels):
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    report = env.describe_machine(verbose=False)
    assert [g.name for g in report.gpus] == ["Tesla T4", "Tesla T4"] and report.as_dict()["cpus"] == 4
    assert report.precision == precision.Precision("fp16", "cpu", auto=True)
    assert "t4x2: 2 x Tesla T4" in report.as_dict()["emulated"]
    assert precision.resolve("auto", torch.device("cpu")).needs_scaler
    assert kk.ranks.default_device() == torch.device("cpu") and kk.loaders.workers_per_process(2) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # a search worker sees its own card only
    assert [g.index for g in kk.gpus.inventory()] == [0]
    with precision.Precision("fp16", "cpu").autocast():  # half kernels; an LSTM between: fp32
        out = torch.nn.LSTM(4, 8, batch_first=True)(torch.nn.Linear(3, 4)(torch.randn(2, 5, 3)))[0]
        assert out.dtype == torch.float32 and torch.is_autocast_enabled("cpu")
        assert torch.nn.Linear(8, 2)(out).dtype == kk.cpuhalf.kernels() == torch.bfloat16
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x3")
    with pytest.raises(kk.emulate.EmulationError, match="use t4x2"):
        env.describe_machine(verbose=False)


def test_the_emulated_fp16_computes_in_fp32_where_the_cpu_has_no_fast_bf16_and_says_so(monkeypatch):
    """An AVX2-only CPU runs bf16 through reference kernels (a convolution 20-40x slower than
    fp32): there the emulated T4 keeps its scaler and computes in fp32; where oneDNN has bf16,
    in bf16. The choice is the CPU's, printed with the precision, and the variable overrides it."""
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    fp16 = precision.Precision("fp16", "cpu", auto=True)
    monkeypatch.setattr(kk.cpuhalf, "_onednn_has_bf16", lambda: False)
    assert fp16.compute_dtype is None and precision.Amp(fp16).scaler.is_enabled()
    with fp16.autocast():
        assert not torch.is_autocast_enabled("cpu") and torch.nn.Linear(3, 2)(torch.randn(1, 3)).dtype == torch.float32
    said = env.describe_machine(verbose=False).as_dict()["precision"]
    assert said == "fp16 + GradScaler (fp32 kernels: this CPU has no fast bf16)"
    monkeypatch.setattr(kk.cpuhalf, "_onednn_has_bf16", lambda: True)
    assert fp16.compute_dtype == torch.bfloat16
    assert env.describe_machine(verbose=False).as_dict()["precision"] == "fp16 + GradScaler (bf16 kernels on this CPU)"
    monkeypatch.setenv("KAGGLEKIT_CPU_HALF", "fp32")  # a fast-bf16 CPU told otherwise: said so, not blamed
    assert fp16.compute_dtype is None
    assert env.describe_machine(verbose=False).as_dict()["precision"] == \
        "fp16 + GradScaler (fp32 kernels: KAGGLEKIT_CPU_HALF=fp32)"
    monkeypatch.setenv("KAGGLEKIT_CPU_HALF", "fp16")  # refused at the machine's report: the run's first cell
    with pytest.raises(kk.cpuhalf.CpuHalfError, match=r"KAGGLEKIT_CPU_HALF='fp16': use bf16 or fp32"):
        env.describe_machine(verbose=False)
    assert precision.choose("auto", None).compute_dtype is None  # a plain CPU run: fp32, as before


def test_as_a_t4_a_bigger_card_decides_fp16_and_caps_its_memory_at_15_gib(monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_FAKE_GPUS", "NVIDIA H100 80GB HBM3:9.0:80")
    assert env.describe_machine(verbose=False).precision.name == "bf16"
    monkeypatch.setenv("KAGGLEKIT_AS", "t4")
    report = env.describe_machine(verbose=False)
    assert report.precision.name == "fp16" and report.as_dict()["as_card"].startswith("Tesla T4")
    capped = []  # no CUDA here: the calls the cap makes are recorded
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("P", (), {"total_memory": 80 * 2**30}))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda f, d: capped.append((round(f, 4), str(d))))
    monkeypatch.setattr(torch.backends.cuda, "enable_flash_sdp", lambda on: capped.append(("flash", on)))
    monkeypatch.setattr(kk.ascard, "_confined", set())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kk.ascard.confine("cuda:0")
    kk.ascard.confine("cuda")  # once per card: "cuda" is the current one (the lent H100 failed on it)
    assert capped == [(0.1875, "cuda:0"), ("flash", False)] and not torch.backends.cuda.matmul.allow_tf32


def test_as_a_t4_without_a_cuda_card_is_refused_in_one_line_before_any_kernel(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    if kk.ranks.cuda_visible():
        pytest.skip("this machine has a CUDA card: the refusal is for one without")
    repo = Path(__file__).resolve().parents[1]
    env_vars = {k: v for k, v in __import__("os").environ.items() if not k.startswith("KAGGLE")}
    done = subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", "run", "quickstart"], cwd=repo,
                          env={**env_vars, "KAGGLEKIT_AS": "t4"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: KAGGLEKIT_AS=t4 needs a CUDA card to behave as a Tesla T4 on, and this machine has none "
        "(KAGGLEKIT_EMULATE=t4x2 takes Kaggle's T4 x2 decisions on a CPU instead)"]
