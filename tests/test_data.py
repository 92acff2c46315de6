"""`make data`: the files a kernel attaches, downloaded by the real kaggle CLI from the loopback
server, land unzipped where a local run's data_dir and `make sandbox DATA=` find them."""
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from kaggle_server import FakeKaggle  # noqa: E402

COMPETITION = "vesuvius-challenge-surface-detection"


def _zip_of(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder).as_posix())
    return buf.getvalue()


def _cli(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kagglekit.tools.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_make_data_downloads_a_competition_and_a_dataset_unzipped_where_data_dir_finds_them(tmp_path):
    from kagglekit import inputs, volumes
    from kagglekit.tools import standins
    standins.vesuvius(tmp_path / "real", shrink=8)
    elliptic = tmp_path / "elliptic" / "elliptic_bitcoin_dataset"
    elliptic.mkdir(parents=True)
    (elliptic / "elliptic_txs_classes.csv").write_text("txId,class\n1,unknown\n")
    with FakeKaggle() as kaggle:
        kaggle.downloads = {COMPETITION: _zip_of(tmp_path / "real"),
                            "ellipticco/elliptic-data-set": _zip_of(tmp_path / "elliptic")}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KAGGLE", "KAGGLEKIT"))}
        env.update(kaggle.env(tmp_path / "home"), KAGGLEKIT_DATA=str(tmp_path / "data"))
        refused = _cli("data", "segmentation_3d", env=env)  # rules not accepted on the website
        assert refused.returncode == 2 and "accept the competition's rules first" in refused.stderr
        assert not (tmp_path / "data" / COMPETITION).exists()  # nothing half-downloaded left
        kaggle.rules_accepted.add(COMPETITION)
        done = _cli("data", "segmentation_3d", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        again = _cli("data", "segmentation_3d", env=env)  # complete already: not fetched twice
        assert "already in" in again.stdout
        assert _cli("data", "gnn_elliptic", env=env).returncode == 0
        fetched = [p for p, _ in kaggle.requests if p.endswith(("/DownloadDataFiles", "/DownloadDataset"))]
    root = tmp_path / "data"
    assert len(fetched) == 3  # refused, downloaded, dataset: the repeat asked for nothing
    folder = inputs.attached(COMPETITION, [root])  # what data_dir="<slug>" resolves to locally
    assert folder == root / COMPETITION and not list(folder.glob("*.zip"))
    layout = volumes.read_layout(folder)
    assert layout.train_ids == [v for v, _, _ in standins.TRAIN] and len(layout.skipped) == 2
    assert (folder / "deprecated_train_labels").is_dir()  # the layout as shipped, subfolders kept
    assert inputs.attached("ellipticco/elliptic-data-set", [root]) == root / "elliptic-data-set"
    assert (root / "elliptic-data-set" / "elliptic_bitcoin_dataset" / "elliptic_txs_classes.csv").exists()


def test_the_sandbox_mounts_data_where_kaggle_mounts_the_kernels_source(tmp_path):
    """DATA= is linked (tens of GB are never copied) at the competition's mount, or at the
    dataset's for a dataset kernel; without DATA the stand-in of the layout is mounted."""
    from kagglekit.tools import sandbox
    data = tmp_path / "data" / COMPETITION
    data.mkdir(parents=True)
    bench = sandbox.Bench(tmp_path, tmp_path, Path("w.whl"), tmp_path, data=data)
    seg = json.loads((REPO / "kernel-metadata" / "segmentation_3d.json").read_text())
    assert sandbox._sources(seg, bench) == {f"competitions/{COMPETITION}": (data, True)}
    gnn = json.loads((REPO / "kernel-metadata" / "gnn_elliptic.json").read_text())
    assert sandbox._sources(gnn, bench) == {"datasets/ellipticco/elliptic-data-set": (data, True)}
    sandbox._mount(data, tmp_path / "v1" / "input" / "competitions" / COMPETITION, link=True)
    mounted = tmp_path / "v1" / "input" / "competitions" / COMPETITION
    assert mounted.is_symlink() and mounted.resolve() == data.resolve()
