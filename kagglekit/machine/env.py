"""Where the code runs, where its files go, seeding, and the environment report.

On Kaggle (``KAGGLE_KERNEL_RUN_TYPE`` is ``Interactive`` or ``Batch``) inputs are
read-only under ``/kaggle/input`` and outputs go to ``/kaggle/working``. Locally
the output folder is ``runs/<notebook>/``. ``KAGGLEKIT_ROOT`` points the kit at
a Kaggle-like tree (``<root>/input``, ``<root>/working``) so tests and sandboxes
can simulate Kaggle without root.
"""
from __future__ import annotations

import os
import platform
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import ascard, cpuhalf, emulate, gpus as gpus_mod, precision as precision_mod

KAGGLE_ROOT = Path("/kaggle")


@dataclass(frozen=True)
class Where:
    on_kaggle: bool  # a real or simulated Kaggle kernel
    run_type: str  # "Interactive", "Batch", or "local"
    root: Path | None  # the Kaggle-like root, None locally
    simulated: bool = False

    @property
    def temp(self) -> Path:
        """The large disk that is not saved: /kaggle/temp on Kaggle, else the system's temp folder."""
        return self.root / "temp" if self.on_kaggle and self.root is not None else Path(tempfile.gettempdir())

    @property
    def input_roots(self) -> list[Path]:
        """Read-only input folders: the Kaggle input root, plus KAGGLEKIT_INPUT."""
        roots = [self.root / "input"] if self.root else []
        roots += [Path(p) for p in os.environ.get("KAGGLEKIT_INPUT", "").split(os.pathsep) if p]
        return [r for r in roots if r.is_dir()]


def cpus() -> int:
    """CPUs this process may run on (its affinity: a container's share, not the host's); the
    emulated machine's under ``KAGGLEKIT_EMULATE`` (Kaggle's 4 vCPUs)."""
    emulated = emulate.machine()
    if emulated is not None:
        return emulated.cpus
    return real_cpus()


def real_cpus() -> int:
    """The cores this process may really use: for thread counts, which no emulation changes."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def available_memory(root: Path = Path("/")) -> int:
    """Bytes of memory this process can still take: Linux's MemAvailable, or less where the
    container's cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) leaves less (a container
    sees the whole machine's meminfo); the physical total where /proc/meminfo is not there."""
    free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    meminfo = _read(root / "proc" / "meminfo")
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            free = int(line.split()[1]) * 1024
    cgroup = root / "sys" / "fs" / "cgroup"
    for limit, used in (("memory.max", "memory.current"),
                        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        cap, now = _read(cgroup / limit).strip(), _read(cgroup / used).strip()
        if cap.isdigit() and now.isdigit():
            free = min(free, max(0, int(cap) - int(now)))
    return free


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def thread_cap(threads: int, environ=None) -> int:
    """``threads``, or fewer where ``OMP_NUM_THREADS`` says so: the user's (or CI's) limit wins
    (OpenMP threads beyond the cores one is given spin on cores another process needs)."""
    cap = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    return min(threads, int(cap)) if cap.isdigit() and int(cap) > 0 else threads


def local_or_attached(reference: str | Path, roots: list[Path] | None = None) -> Path:
    """``reference`` as a path when it exists here, else the attached Kaggle source it names
    (``inputs.attached``; ``roots``: the input roots, default this machine's), else the path as given,
    for the caller to name what is missing."""
    from . import inputs
    path = Path(reference).expanduser()
    if path.exists():
        return path
    if roots is None:
        roots = where().input_roots
    return inputs.attached(str(reference), roots) or path


def competition_rerun() -> bool:
    """Is this Kaggle's scoring rerun of a code competition (``KAGGLE_IS_COMPETITION_RERUN``)?
    The hidden test set replaces the public one, internet is off and the competition's own
    runtime cap applies."""
    return bool(os.environ.get("KAGGLE_IS_COMPETITION_RERUN", "").strip())


def where() -> Where:
    override = os.environ.get("KAGGLEKIT_ROOT")
    run_type = os.environ.get("KAGGLE_KERNEL_RUN_TYPE", "")
    if override:
        return Where(True, run_type or "Batch", Path(override), simulated=True)
    if run_type:
        return Where(True, run_type, KAGGLE_ROOT)
    return Where(False, "local", None)


def working_dir(name: str, here: Where | None = None) -> Path:
    """The output folder of notebook ``name``; created if missing.

    ``KAGGLEKIT_OUTPUT`` wins (the runner sets it), then the Kaggle working dir,
    then ``<KAGGLEKIT_RUNS>/<name>`` (``make lab`` sets it: a notebook opened there runs in
    notebooks/), else ``runs/<name>`` under the current directory.
    """
    here = here or where()
    if os.environ.get("KAGGLEKIT_OUTPUT"):
        path = Path(os.environ["KAGGLEKIT_OUTPUT"])
    elif here.on_kaggle and here.root is not None:
        path = here.root / "working"
    else:
        path = Path(os.environ.get("KAGGLEKIT_RUNS") or "runs") / name
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def find_inputs(pattern: str, here: Where | None = None) -> list[Path]:
    """Every path under the input roots matching the glob ``pattern``, at any depth.

    Kaggle mounts inputs at ``input/<slug>`` (old) or ``input/datasets/<owner>/<slug>``,
    ``input/notebooks/<owner>/<slug>``... (since 2026): search, never hard-code.
    The inputs are walked once per process (``inputs.InputIndex``), not per lookup.
    """
    from . import inputs
    here = here or where()
    return inputs.index(here.input_roots).find(pattern)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and, lazily, every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also queues the seed for CUDA without initialising it


@dataclass
class EnvReport:
    where: Where
    gpus: list
    precision: precision_mod.Precision
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return self.data

    def __str__(self) -> str:
        width = max(len(k) for k in self.data)
        return "\n".join(f"  {k:<{width}}  {v}" for k, v in self.data.items())


def _kernels_note(policy) -> str:
    """What an emulated card's half precision computes in on this CPU (``cpuhalf``); its
    setting checked here, before any work."""
    if (policy.device_type, policy.name) != ("cpu", "fp16"):
        return ""
    return f" ({cpuhalf.describe()})"


def describe_machine(precision: str = "auto", output_dir: Path | None = None,
           verbose: bool = True) -> EnvReport:
    """Describe the machine and decide the precision; never initialises CUDA."""
    from .version import __version__

    here = where()
    gpus = gpus_mod.inventory()
    first = gpus[0] if gpus else None
    emulated, imitated = emulate.machine(), ascard.card()
    card = imitated or first  # KAGGLEKIT_AS=t4: the T4's decision on a bigger card
    policy = precision_mod.choose(precision, card.capability if card else None,
                                  card.name if card else "", "cpu" if emulated else "cuda")
    data = {
        "where": f"kaggle ({here.run_type})" + (" [simulated]" if here.simulated else "")
                 if here.on_kaggle else "local",
        "gpus": [g.as_dict() for g in gpus],
        "gpu_summary": ", ".join(f"{g.name} ({g.memory_gb:g} GB, cc {g.capability[0]}.{g.capability[1]})"
                                 for g in gpus) or "none (CPU only)",
        "precision": policy.name + (" + GradScaler" if policy.needs_scaler else "") + _kernels_note(policy),
        "cpus": cpus(),
        "emulated": emulated.describe() if emulated else "no",
        "as_card": ascard.describe(imitated),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "kagglekit": __version__,
        "kagglekit_path": str(Path(__file__).resolve().parent),  # which copy ran (embedded?)
        "input_roots": [str(p) for p in here.input_roots],
        "output_dir": str(output_dir) if output_dir else "",
    }
    env = EnvReport(here, gpus, policy, data)
    if verbose:
        _show(data)
    return env


def _show(data: dict) -> None:
    """The report as a table; where the kit came from and where outputs go, by name
    only (absolute local paths say nothing to a reader of the notebook)."""
    from . import display
    shown = {k: v for k, v in data.items() if k not in ("gpus", "kagglekit_path", "input_roots")}
    shown["output_dir"] = Path(data["output_dir"]).name if data["output_dir"] else ""
    shown["inputs"] = len(data["input_roots"])
    if display.in_notebook():
        display.show_table([{"": k, "value": str(v)} for k, v in shown.items()])
    else:
        print("kagglekit environment\n" + "\n".join(f"  {k:<12}  {v}" for k, v in shown.items()))


class AcceleratorError(RuntimeError):
    """The GPUs the run was pushed for cannot be used at all."""


def check_accelerator(gpus: list, expected: str) -> dict:
    """Did Kaggle give the GPUs the push asked for? ``expected`` is "count:name" ("2:T4").

    Kaggle may substitute another shape silently; a run on the wrong hardware is
    said loudly at the top of the notebook and recorded in metrics.json.
    """
    count, _, name = expected.partition(":")
    found = [g.name for g in gpus]
    ok = len(found) == int(count) and all(name in g for g in found)
    if not found and int(count) and not os.environ.get("KAGGLEKIT_ALLOW_NO_GPU"):
        raise AcceleratorError(
            f"this session asked for {count} x {name} (the pushed machine shape) but no GPU can be "
            "used: neither NVML, nvidia-smi nor the driver's /proc files show one. Check the "
            "notebook's Accelerator setting (GPU T4 x2) and that the session got it; training on "
            "the CPU would take many times the GPU's hours. (KAGGLEKIT_ALLOW_NO_GPU=1 runs anyway.)")
    if not ok:
        banner = "!" * 78
        print(f"{banner}\nkagglekit: this session asked for {count} x {name} but got "
              f"{', '.join(found) or 'no GPU'}. Timings and throughput will not match a T4 x2 "
              f"run; check the notebook's Accelerator setting (machine_shape).\n{banner}",
              file=sys.stderr, flush=True)
    return {"expected": f"{count} x {name}", "found": found, "ok": ok}
