"""torchvision importable beside the pinned CPU torch, for set-up only (never in a Kaggle kernel).

PyPI's torchvision 0.28.0 is the release paired with torch 2.13.0 (as Kaggle's image pairs them),
but its compiled ``_C.so`` links libtorch_cuda, which a CPU build of torch lacks: the library
fails to load (torchvision swallows that), its ops are never registered, and the fake-tensor
registrations ``torchvision/_meta_registrations.py`` makes at import time then raise
``operator torchvision::nms does not exist``: ``import torchvision`` (and so ``import timm``)
fails. Defining the two ops it registers fakes for by name (their schemas, no kernel) lets the
Python part import: models, transforms, timm. Only the compiled ops (nms, roi_align,
decode_jpeg, ...) stay missing, and the kit never calls them: it reads images with PIL.

The other route measured (torch 2.14.1 with torchvision 0.29.1, CUDA builds) is a 5.5 GB venv
on a torch that is not Kaggle's; this one adds nothing but a few lines.

``python setup/torchvision_cpu.py <python>``: when ``<python>`` cannot import torchvision for
that reason, installs this file into its site-packages with a ``.pth`` line that arms it at
start-up, and says so; otherwise does nothing. Armed, it costs nothing until torchvision is
first imported (a finder on ``sys.meta_path``, no torch import at start-up), which matters
because every process of the suite starts Python.
"""
from __future__ import annotations

import sys

MODULE = "_kagglekit_torchvision_cpu"
SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
           "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_library = None  # the definitions live as long as the process (a dropped Library undefines them)


def define_schemas() -> None:
    """The ops torchvision's import registers fakes for, defined without kernels (once). Armed only
    where ``install`` saw the compiled library fail, so nothing else ever defines them."""
    global _library
    if _library is None:
        import torch
        _library = torch.library.Library("torchvision", "DEF")
        for schema in SCHEMAS:
            _library.define(schema)


class _BeforeTorchvision:
    """A meta-path finder that defines the schemas when ``torchvision`` is first imported, then
    steps aside (returns None: the normal import goes on)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(_BeforeTorchvision)
            define_schemas()
        return None


def arm() -> None:
    """Called by the ``.pth`` line at every start of the venv's Python."""
    if _BeforeTorchvision not in sys.meta_path and "torchvision" not in sys.modules:
        sys.meta_path.insert(0, _BeforeTorchvision)


def install(python: str) -> str:
    """Arm ``python``'s site-packages when its torchvision fails to import for the reason above;
    what was done, in words."""
    import shutil
    import subprocess
    from pathlib import Path
    probe = subprocess.run([python, "-c", "import torchvision"], capture_output=True, text=True)
    if probe.returncode == 0:
        return "torchvision imports as installed: nothing to do"
    if "torchvision::nms does not exist" not in probe.stderr:
        raise SystemExit(f"torchvision fails to import for another reason:\n{probe.stderr[-2000:]}")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    shutil.copyfile(__file__, site / f"{MODULE}.py")
    (site / "kagglekit-torchvision-cpu.pth").write_text(f"import {MODULE}; {MODULE}.arm()\n")
    check = subprocess.run([python, "-c", "import importlib.util, torchvision; print(torchvision.__version__); "
                                          "importlib.util.find_spec('timm') and __import__('timm')"],  # where it is
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"torchvision still fails to import:\n{check.stderr[-2000:]}")
    return (f"torchvision {check.stdout.strip()}'s compiled ops cannot load beside this CPU torch; its ops' "
            f"schemas are defined at its import ({site.name}/{MODULE}.py): timm and torchvision's models "
            "import, its compiled ops (nms, roi_align, decode_jpeg) stay unavailable")


if __name__ == "__main__":
    print(f"setup: {install(sys.argv[1] if len(sys.argv) > 1 else sys.executable)}")
