"""What `make push` sends, run in Kaggle's image, three versions per notebook (`make sandbox`).

Each notebook's three versions are one test marked ``sandbox`` (``pytest -m sandbox`` runs
them alone); `make test` runs them first, beside the rest of the suite on a second xdist
worker. The kernel environment is built once from sandbox/kaggle-image.txt (about 35 s on a
fresh machine)."""
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))  # all six

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="session")
def kernel_env():
    """The sandbox venv (`make test` builds it first; reused while the image list is unchanged)."""
    from kagglekit.tools.sandbox import kernel_python
    with _in_repo():
        python = kernel_python()
    have = subprocess.run([str(python), "-I", "-c", "import importlib.util as u, torch, numpy; "
                           "print(u.find_spec('torch_geometric') is None, u.find_spec('kagglekit') is None,"
                           " numpy.__version__)"], capture_output=True, text=True, check=True)
    assert have.stdout.split() == ["True", "True", "2.0.2"]  # Kaggle's numpy; no PyG, no kit
    return python


@pytest.fixture(scope="session")
def bench(kernel_env, tmp_path_factory):
    """The kit's wheel and the wheels dataset, built once (per xdist worker) for all six."""
    from kagglekit.tools import sandbox
    with _in_repo():
        # two at a time, as `make test`'s two workers run them: each kernel its share of the cores
        yield sandbox.prepare(tmp_path_factory.mktemp("box"), NOTEBOOKS, jobs=2)


@contextlib.contextmanager
def _in_repo():
    cwd = os.getcwd()
    os.chdir(REPO)  # kernel-metadata/ and notebooks/ are read relative to the checkout
    try:
        yield
    finally:
        os.chdir(cwd)


@pytest.mark.sandbox
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_pushed_notebook_runs_in_kaggles_image_and_versions_2_and_3_resume_or_skip(
        bench, notebook):
    """What `make sandbox NB=<notebook>` runs: the build push sends, three versions."""
    from kagglekit.tools import sandbox
    with _in_repo():
        outcomes = sandbox.run_notebook(notebook, bench)
    assert [(o.version, o.ok) for o in outcomes] == [(1, True), (2, True), (3, True)], \
        [o.verdict for o in outcomes]
    for version in (2, 3):
        _check_a_later_version(notebook, bench.work / notebook / f"v{version}" / "working")


def _check_a_later_version(notebook: str, working: Path) -> None:
    metrics = json.loads((working / "metrics.json").read_text())
    assert metrics["env"]["where"] == "kaggle (Batch) [simulated]"
    assert "/kagglekit-" in metrics["env"]["kagglekit_path"]  # embedded, not the checkout
    chain = metrics.get("chain", {})
    assert set(chain.values()) <= {"skipped", "resumed", "cached", "hit"}, (notebook, chain)
    assert chain or notebook == "gpu_utilization"  # a measurement: nothing to resume


def test_a_missing_wheel_fails_in_the_first_cell_naming_the_package_and_the_fix(kernel_env, tmp_path):
    """The GNN without the wheels dataset attached: torch-geometric is not in Kaggle's image."""
    from kagglekit.tools import sandbox
    from kagglekit.tools.publish import build as build_mod
    with _in_repo():
        built = build_mod.build("gnn_node_classification", out_root=tmp_path / "build",
                                owner=sandbox.OWNER)
        empty = tmp_path / "no-wheels"
        empty.mkdir()
        jupyter = sandbox._kernelspec(tmp_path / "jupyter", kernel_env)
        outcome = sandbox.run_version(built / "kagglekit-gnn-node-classification.ipynb",
                                      "kagglekit-gnn-node-classification", 1, tmp_path / "v1",
                                      None, empty, jupyter, sandbox.CAP)
    assert not outcome.ok
    assert outcome.verdict.startswith("FAILED: ModuleNotFoundError: torch-geometric (a wheel "
                                      "torch_geometric-2.8.1-*.whl): not in Kaggle's image")
    assert "sandbox/kagglekit-wheels" in outcome.verdict and "make push" in outcome.verdict
    executed = json.loads((tmp_path / "v1" / "working" / "kagglekit-gnn-node-classification.ipynb")
                          .read_text())
    code = [c for c in executed["cells"] if c["cell_type"] == "code"]
    assert "kagglekit-install" in code[0]["metadata"]["tags"]  # the first cell, before any work
    assert [o["output_type"] for o in code[0]["outputs"]][-1] == "error"
    assert all(c["execution_count"] is None for c in code[1:])  # nothing after it ran


def test_a_later_version_that_trains_from_scratch_is_a_failure():
    from kagglekit.tools.sandbox import verdict
    assert verdict(1, {"fit": "trained", "cache:x": "computed"})[0]  # version 1 may train
    ok, text = verdict(2, {"fit": "trained", "pretrain": "cached", "cache:x": "hit"})
    assert not ok and text.startswith("FAILED: trained again from scratch: fit")
    assert not verdict(3, {"cache:lstm": "computed"})[0]  # a cache entry recomputed
    assert verdict(2, {"fit": "resumed", "other": "skipped", "cache:x": "hit"}) == \
        (True, "ok (hit: cache:x; resumed: fit; skipped: other)")
