"""The commands the README and `make help` give, run as a user types them, through the Makefile,
in a clean checkout of this tree; and a Makefile that reads none of GNU make's built-in
variables (`AS=t4` once read make's own AS, the assembler: every `make run` failed, CI green)."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from kaggle_server import FakeKaggle  # noqa: E402
from test_sandbox import _check_a_later_version  # noqa: E402


def make_builtins() -> set[str]:
    """The variables GNU make defines before reading any makefile (AS, CC, RM, ...)."""
    printed = subprocess.run(["make", "-p", "-f", os.devnull], capture_output=True, text=True,
                             env=_make_env()).stdout
    found, origin = set(), ""
    for line in printed.splitlines():
        if line.startswith("# "):
            origin = line
        elif origin == "# default" and (m := re.match(r"([A-Za-z_][A-Za-z0-9_.-]*) :?= ", line)):
            found.add(m.group(1))
    return found


def makefile_inputs(text: str) -> set[str]:
    """The variables a Makefile reads without defining them itself: what a user passes (a name
    read only to refuse it when given on the command line aside)."""
    refused = set(re.findall(r"^ifeq \(\$\(origin (\w+)\),command line\)\n\$\(error ", text, re.M))
    for name in refused:
        text = re.sub(rf"^ifeq \(\$\(origin {name}\),command line\)\n\$\(error .*\)\nendif", "", text, flags=re.M)
    read = set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", text))
    read |= set(re.findall(r"^(?:ifdef|ifndef)\s+(\w+)", text, re.M))
    defined = set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\s*[:?+]?=", text, re.M))
    return read - defined - {"MAKE", "MAKEFILE_LIST", "CURDIR", "MAKEFLAGS"}


def test_the_makefile_reads_no_variable_make_defines_itself():
    """A Makefile variable named like one of make's built-ins (AS, CC, LD, RM...) is never empty,
    from make itself or from a toolchain's environment (conda sets AS and CC): the
    Makefile's own names are none of them, and it turns the built-ins off."""
    text = (REPO / "Makefile").read_text()
    builtins = make_builtins()
    assert {"AS", "CC", "RM", "LD"} <= builtins  # what this make defines, read from it
    clash = makefile_inputs(text) & builtins
    assert not clash, f"the Makefile reads make's built-in variables {sorted(clash)}: rename them"
    assert "MAKEFLAGS += --no-builtin-rules --no-builtin-variables" in text


def test_make_run_passes_no_card_unless_asked_and_refuses_the_old_name():
    """`make run`'s command line as make expands it (-n: printed, not run)."""
    plain = _make("-n", "run", "NB=quickstart", "P=smoke=True", cwd=REPO)
    assert plain.returncode == 0 and "KAGGLEKIT_AS" not in plain.stdout, plain.stdout
    assert "kagglekit.tools.cli run quickstart" in plain.stdout and "-p smoke=True" in plain.stdout
    card = _make("-n", "run", "NB=quickstart", "CARD=t4", cwd=REPO)
    assert "KAGGLEKIT_AS=t4 " in card.stdout
    old = _make("-n", "run", "NB=quickstart", "AS=t4", cwd=REPO)
    assert old.returncode == 2 and "AS=t4 is now CARD=t4" in old.stderr


def test_make_test_and_test_e2e_split_the_suite_by_the_e2e_mark_and_ci_runs_both():
    """`make test` (the README's) runs every test but those marked e2e, `make test-e2e` those; a
    mistyped mark fails collection (--strict-markers), so no pipeline end to end slips into
    `make test`'s 20 minutes unseen; `.ci/run` runs both tiers."""
    fast = _make("-n", "test", "PYTEST_ARGS=", cwd=REPO)  # CI's own PYTEST_ARGS reach us through the environment
    whole = _make("-n", "test-e2e", "PYTEST_ARGS=-ra", cwd=REPO)
    assert fast.returncode == whole.returncode == 0, fast.stderr + whole.stderr
    assert [line for line in fast.stdout.splitlines() if "-m pytest" in line][-1].endswith('-m "not e2e" ')
    assert [line for line in whole.stdout.splitlines() if "-m pytest" in line][-1].endswith('-m "e2e" -ra')
    config = (REPO / "pyproject.toml").read_text()
    assert "--strict-markers" in config and '"e2e: ' in config
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert [line.split()[:2] for line in ci if line.startswith("make ")] == \
        [["make", "test"], ["make", "test-e2e"], ["make", "lint"]]


def _make_env(**extra) -> dict:
    """The user's environment: no make of ours around it (no jobserver, no MAKEFLAGS)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    return {**env, **extra}


def _make(*args: str, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, env=env or _make_env(),
                          capture_output=True, text=True, timeout=timeout)


CLONED_AT = 946_684_800  # 2000-01-01: older than any set-up stamp


def clean_checkout(root: Path) -> Path:
    """This tree as a fresh clone holds it (tracked and new files, nothing git ignores: no runs/,
    no build/), with this checkout's .venv and .sandbox linked in: their set-up is `make test`'s
    own, done before the suite. The files are dated before the set-up's stamps, as a clone set up
    after it was made is: make builds nothing again."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
            os.utime(root / name, (CLONED_AT, CLONED_AT))
    for linked in (".venv", ".sandbox"):
        (root / linked).symlink_to(REPO / linked, target_is_directory=True)
    return root


@pytest.mark.sandbox
def test_the_readmes_commands_as_typed_from_a_clean_checkout(tmp_path, kernel_env):
    """`make run NB=quickstart P="smoke=True"` (the README's first command), `make runs`, `make view`,
    a typo in P= refused in one line before any kernel, `make push`/`status`/`output` against the
    loopback Kaggle, and `make sandbox NB=quickstart` (what push sends, version after version: the third not run, said,
    since the second carried the first's files)."""
    tree = clean_checkout(tmp_path / "clone")
    ran = _make("run", "NB=quickstart", "P=smoke=True", cwd=tree)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    folders = [p for p in (tree / "runs" / "quickstart").iterdir() if p.name != "latest"]
    assert [p.name.split("-")[0] for p in folders] == ["smoke=True"]
    assert json.loads((folders[0] / "metrics.json").read_text())["summary"][0]["passed"]
    assert "== quickstart: done in" in ran.stdout and "validation accuracy" in ran.stdout

    runs = _make("runs", cwd=tree)
    assert runs.returncode == 0 and "quickstart" in runs.stdout and "smoke=True" in runs.stdout

    view = _make("view", "NB=quickstart", cwd=tree)
    assert view.returncode == 0 and (tree / "runs" / "quickstart" / "latest" / "quickstart.html").exists()

    typo = _make("run", "NB=quickstart", "P=epcohs=3", cwd=tree)
    said = [line for line in typo.stderr.splitlines() if not line.startswith("make: ***")]
    assert typo.returncode == 2 and len(said) == 1, said
    assert said[0].startswith("error: unknown parameter 'epcohs' (did you mean 'epochs'?)")
    assert not (tree / "runs" / "quickstart" / "epcohs=3").exists()

    with FakeKaggle() as kaggle:
        env = _make_env(**kaggle.env(tmp_path / "home"), KAGGLEKIT_BUILD=str(tmp_path / "build"))
        pushed = _make("push", "NB=quickstart", cwd=tree, env=env)
        assert pushed.returncode == 0 and "pushed kagglekit-quickstart: version 1" in pushed.stdout, pushed.stderr
        status = _make("status", "NB=quickstart", cwd=tree, env=env)
        assert status.returncode == 0 and "COMPLETE" in status.stdout
        kaggle.files = {"metrics.json": b"{}"}
        output = _make("output", "NB=quickstart", cwd=tree, env=env)
        assert output.returncode == 0, output.stderr
    assert (tree / "runs" / "kaggle" / "kagglekit-quickstart" / "v1" / "metrics.json").exists()

    box = _make("sandbox", "NB=quickstart", f"KEEP={tmp_path / 'box'}", cwd=tree)
    assert box.returncode == 0 and "sandbox: 2 of 2 versions ok" in box.stdout, box.stdout[-2000:]
    assert "sandbox quickstart v3: not run: version 2 carried version 1's files byte for byte" in box.stdout
    _check_a_later_version("quickstart", tmp_path / "box" / "quickstart" / "v2" / "working")
