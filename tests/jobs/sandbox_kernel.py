"""An IPython kernel that cannot see the developer's kagglekit, as on Kaggle.

The venv has kagglekit installed in editable mode; this launcher removes that
finder (and the checkout from sys.path) before the kernel starts, so the only
kagglekit a notebook can import is the one its embedded wheel installs.
"""
import sys
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[2])
sys.meta_path = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")
                 and "__editable__" not in repr(f)]
sys.path = [p for p in sys.path if p not in ("", ".", REPO)]
for name in [m for m in sys.modules if m == "kagglekit" or m.startswith("kagglekit.")]:
    del sys.modules[name]

from ipykernel import kernelapp  # noqa: E402

kernelapp.launch_new_instance()
