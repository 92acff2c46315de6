"""The real ``kaggle`` CLI, with its output checked (its exit codes lie).

``kernels push`` prints "Kernel push error: ..." and exits 0 when the server
refuses; ``kernels status`` exits 0 even for ERROR. Each wrapper parses what the
CLI printed and raises KaggleError with the message instead.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DONE = {"COMPLETE", "ERROR", "CANCEL_ACKNOWLEDGED"}
BUSY = {"QUEUED", "RUNNING", "NEW_SCRIPT", "CANCEL_REQUESTED"}


class KaggleError(RuntimeError):
    """The kaggle CLI or the server reported a failure."""


def executable() -> str:
    beside = Path(sys.executable).parent / "kaggle"  # the venv's pinned CLI
    return str(beside) if beside.exists() else (shutil.which("kaggle") or "kaggle")


def run_cli(*args: str, timeout: float = 600, env: dict | None = None) -> str:
    """Run ``kaggle *args`` (``env``: variables to add); its output, or KaggleError naming
    the command and why."""
    proc = subprocess.run([executable(), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise KaggleError(f"`kaggle {' '.join(args[:2])}` failed (exit {proc.returncode}):\n"
                          f"{out.strip()[-2000:]}")
    return out


# ---- push -----------------------------------------------------------------------------------
@dataclass
class Pushed:
    version: int | None
    url: str
    warnings: list = field(default_factory=list)  # sources Kaggle did not attach, and why
    problems: list = field(default_factory=list)  # warnings that leave the run without its data


def push(folder: Path, accelerator: str = "NvidiaTeslaT4") -> Pushed:
    """Push ``folder``; the version is recorded in ``pushed.json`` whenever Kaggle made one.

    Sources Kaggle did not attach are reported, not raised after the fact: the version
    exists by then. The kernel's own output on its first push is expected (the kernel
    did not exist yet; the next push attaches it); any other is a problem to report.
    """
    meta = json.loads((Path(folder) / "kernel-metadata.json").read_text())
    out = run_cli("kernels", "push", "-p", str(folder), "--accelerator", accelerator)
    refused = re.search(r"Kernel push error: (.*)", out)
    if refused:
        raise KaggleError(f"Kaggle refused the push of {folder}: {refused.group(1).strip()}")
    done = re.search(r"Kernel version (\d+)? ?successfully pushed\.\s+Please check progress at (\S+)",
                     out)
    if not done:
        raise KaggleError(f"unexpected output from `kaggle kernels push`:\n{out.strip()[-2000:]}")
    pushed = Pushed(int(done.group(1)) if done.group(1) else None, done.group(2))
    for what, items in re.findall(r"The following are not valid (\w+ ?\w*?) sources[^:]*: (.*)", out):
        for item in re.findall(r"[\w./-]+", items):
            if item == meta["id"] and what.startswith("kernel"):
                pushed.warnings.append(f"{item}: its own output is not attached yet (the kernel did "
                                       "not exist before this first push); the next push attaches it")
            else:
                pushed.problems.append(f"{what} source {item} was not attached: check its name "
                                       "and that your account can read it")
    (Path(folder) / "pushed.json").write_text(json.dumps(
        {"version": pushed.version, "url": pushed.url, "warnings": pushed.warnings,
         "problems": pushed.problems}))
    return pushed


# ---- status, logs, output --------------------------------------------------------------------
@dataclass
class Status:
    state: str  # QUEUED, RUNNING, COMPLETE, ERROR, ...
    failure: str = ""


def parse_status(out: str) -> Status:
    found = re.search(r'has status "(?:KernelWorkerStatus\.)?([A-Za-z_]+)"', out)
    if not found:
        raise KaggleError(f"unexpected output from `kaggle kernels status`:\n{out.strip()[-1000:]}")
    failure = re.search(r'Failure message: "(.*)"', out, re.S)
    return Status(found.group(1).upper(), failure.group(1) if failure else "")


def status(kernel: str) -> Status:
    return parse_status(run_cli("kernels", "status", kernel))


def wait(kernel: str, timeout_s: float = 12 * 3600, first_s: float = 10, max_s: float = 300,
         sleep=time.sleep) -> Status:
    """Poll with exponential back-off until the run is done or ``timeout_s`` passes."""
    deadline, delay = time.monotonic() + timeout_s, first_s
    while True:
        current = status(kernel)
        print(f"{kernel}: {current.state}", flush=True)
        if current.state in DONE or time.monotonic() + delay > deadline:
            return current
        sleep(delay)
        delay = min(max_s, delay * 2)


def logs(kernel: str) -> str:
    """The latest run's log as text: each entry's data, in order (tracebacks included)."""
    raw = run_cli("kernels", "logs", kernel).strip()
    try:
        entries = json.loads(raw)
    except ValueError:
        return raw
    return "".join(str(e.get("data", "")) for e in entries if isinstance(e, dict))


def current_version(kernel: str) -> int | None:
    """The kernel's latest version number as the server reports it (the version whose
    run ``status`` / ``output`` / ``logs`` describe: the CLI never sends a version)."""
    owner, slug = kernel.split("/", 1)
    code = ("from kaggle import api\n"
            "from kagglesdk.kernels.types.kernels_api_service import ApiGetKernelRequest\n"
            f"r = ApiGetKernelRequest(); r.user_name, r.kernel_slug = {owner!r}, {slug!r}\n"
            "with api.build_kaggle_client() as k:\n"
            "    print(k.kernels.kernels_api_client.get_kernel(r).metadata.current_version_number)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    found = re.search(r"^(\d+)\s*$", proc.stdout, re.M)
    return int(found.group(1)) or None if found else None


def output(kernel: str, dest: Path) -> list[Path]:
    """Download every output file (subfolders kept) and the log into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    run_cli("kernels", "output", kernel, "-p", str(dest), "--force", timeout=3600)
    return sorted(p for p in dest.rglob("*") if p.is_file())


def pull(kernel: str, dest: Path) -> tuple[Path, dict]:
    """The kernel's notebook as Kaggle holds it now, and its metadata (``pull -m``)."""
    dest.mkdir(parents=True, exist_ok=True)
    run_cli("kernels", "pull", kernel, "-p", str(dest), "-m")
    meta = json.loads((dest / "kernel-metadata.json").read_text())
    return dest / meta["code_file"], meta


def quota() -> str:
    """GPU and TPU hours used and left this week, as the CLI prints them."""
    return run_cli("quota").strip()


def submit_file(competition: str, file: Path, message: str) -> str:
    """Upload ``file`` to a file competition; the server's answer."""
    out = run_cli("competitions", "submit", competition, "-f", str(file), "-m", message)
    if re.search(r"^(Could not|.*error|.*failed)", out, re.M | re.I):
        raise KaggleError(f"`kaggle competitions submit` refused: {out.strip()[-500:]}")
    return out.strip().splitlines()[-1] if out.strip() else "submitted"


def submissions(competition: str) -> list[dict]:
    """Every submission of the account to ``competition``, newest first (the CLI's CSV)."""
    text = run_cli("competitions", "submissions", competition, "-v")
    start = text.find("ref,")  # the CLI's notices come before its CSV
    return list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []


def submit_code(competition: str, kernel: str, version: int, file_name: str, message: str) -> str:
    """Submit ``file_name`` of ``kernel``'s version ``version`` to a code competition (Kaggle
    reruns that version on the hidden test set); the server's answer."""
    out = run_cli("competitions", "submit", competition, "-k", kernel, "-v", str(version),
                  "-f", file_name, "-m", message)
    if re.search(r"^(Could not|.*error)", out, re.M | re.I):
        raise KaggleError(f"`kaggle competitions submit` refused: {out.strip()[-500:]}")
    return out.strip()



# ---- data ------------------------------------------------------------------------------------
def download_competition(competition: str, dest: Path) -> None:
    """The competition's files as one zip in ``dest`` (``kaggle competitions download``)."""
    try:
        run_cli("competitions", "download", competition, "-p", str(dest), "--force", timeout=6 * 3600)
    except KaggleError as err:
        if "403" in str(err) or "Forbidden" in str(err):
            raise KaggleError(f"Kaggle refused the files of {competition} (403): accept the "
                              f"competition's rules first, on https://www.kaggle.com/competitions/"
                              f"{competition}/rules (its 'Join competition' button)") from None
        raise
    if not list(Path(dest).glob("*.zip")):
        raise KaggleError(f"`kaggle competitions download {competition}` left no zip in {dest}")


def download_dataset(dataset: str, dest: Path) -> None:
    """The dataset's files as a zip in ``dest`` (``kaggle datasets download``)."""
    run_cli("datasets", "download", dataset, "-p", str(dest), "--force", timeout=6 * 3600)
    if not list(Path(dest).glob("*.zip")):
        raise KaggleError(f"`kaggle datasets download {dataset}` left no zip in {dest}")
