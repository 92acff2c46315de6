"""A checkpoint resumes only into the run it belongs to: config, data and model."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import cache, checkpoint, datasets, loaders as data, models, tune
from kagglekit.state.checkpoint import CheckpointManager
from kagglekit.state.identity import Identity

LOSS = kk.supervised(F.cross_entropy)
REPO = Path(__file__).resolve().parents[1]
PLANETOID = REPO.parent / "shared" / "data" / "planetoid"


def _fit(ckpt, dataset, hidden=32, epochs=1, **kw):
    kk.seed_everything(0)
    model = models.MLP(16, hidden, 4)
    return kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), data.make_loader(dataset, 64, num_workers=0),
                  LOSS, run=kk.Alone(config={"lr": 0.1}, **kw), epochs=epochs, checkpoints=ckpt, progress=False)


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("step-*"))}


def _shuffled_labels(ds):
    x, y = ds.tensors
    return torch.utils.data.TensorDataset(x, y[torch.randperm(len(y), generator=torch.Generator().manual_seed(1))])


def test_the_same_data_twice_skips_the_finished_run(tmp_path):
    ds = datasets.tabular(256, features=16)
    first = _fit(CheckpointManager(tmp_path, search=[]), ds)
    again = _fit(CheckpointManager(tmp_path, search=[]), datasets.tabular(256, features=16))
    assert first.stopped == "completed" and again.stopped == "already_complete"
    assert again.resumed_from == first.checkpoint


def test_data_with_identical_shapes_and_other_content_does_not_resume(tmp_path):
    ds = datasets.tabular(256, features=16)
    first = _fit(CheckpointManager(tmp_path, search=[]), ds)
    before = _files(tmp_path)
    with pytest.warns(UserWarning, match=r"different data \(TensorDataset\(tensor\[256, 16\], "
                                         r"tensor\[256\]\), fingerprint \w+ -> TensorDataset"):
        other = _fit(CheckpointManager(tmp_path, search=[]), _shuffled_labels(ds))
    assert other.resumed_from is None and other.steps_this_session == other.steps == 4
    assert Path(other.checkpoint).parent != Path(first.checkpoint).parent  # a folder of its own
    after = _files(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before  # the first run's, untouched
    assert len(after) == 2 * len(before)


def test_a_model_of_another_width_does_not_resume_and_the_parameter_is_named(tmp_path, monkeypatch):
    ds = datasets.tabular(256, features=16)
    _fit(CheckpointManager(tmp_path, search=[]), ds, hidden=32)

    def never(*args, **kwargs):
        pytest.fail("a checkpoint of another model was loaded")
    monkeypatch.setattr(checkpoint, "load", never)  # detected from the sidecar, before any load
    with pytest.warns(UserWarning, match=r"a different model \(body\.0\.weight: "
                                         r"float32 \[32, 16\] -> float32 \[64, 16\]"):
        wider = _fit(CheckpointManager(tmp_path, search=[]), ds, hidden=64)
    assert wider.resumed_from is None and wider.stopped == "completed"


def test_force_retrain_clears_only_its_own_run(tmp_path):
    ds = datasets.tabular(256, features=16)
    _fit(CheckpointManager(tmp_path, search=[]), _shuffled_labels(ds))
    other_run = _files(tmp_path)
    own = _fit(CheckpointManager(tmp_path, search=[]), ds, epochs=2)  # this run, finished
    forced = _fit(CheckpointManager(tmp_path, search=[]), ds, resume=False)
    # Trained again from step 0 (not skipped, not resumed), its own old steps gone...
    assert forced.resumed_from is None and forced.stopped == "completed"
    assert forced.steps_this_session == forced.steps == 4 and own.steps == 8
    own_folder = Path(forced.checkpoint).parent
    assert sorted(p.name for p in own_folder.glob("step-*.pt")) == ["step-00000004.pt"]
    # ...and the other run's checkpoints byte for byte as they were.
    assert {k: v for k, v in _files(tmp_path).items() if k in other_run} == other_run


def test_a_previous_version_with_other_data_is_not_resumed_on_kaggle_mounts(tmp_path, kaggle_tree):
    ds = datasets.tabular(256, features=16)
    v1 = tmp_path / "v1" / "checkpoints" / "mlp"
    _fit(CheckpointManager(v1, search=[]), ds)
    mounted = kaggle_tree / "input" / "notebooks" / "me" / "kernel"
    shutil.copytree(tmp_path / "v1", mounted)
    working = kaggle_tree / "working" / "checkpoints" / "mlp"
    with pytest.warns(UserWarning, match=r"not resuming .*/input/notebooks/me/kernel/checkpoints/mlp/"
                                         r"\w+/step-00000004\.pt: it was trained with different data"):
        other = _fit(CheckpointManager(working), _shuffled_labels(ds))
    assert other.resumed_from is None and other.steps_this_session == 4
    same = _fit(CheckpointManager(working), ds)  # the data v1 trained on: its finished run
    assert "/input/notebooks/me/kernel/checkpoints/mlp/" in same.resumed_from
    assert same.stopped == "already_complete"


def test_identity_keys_ignore_run_control_and_follow_config_data_and_model():
    model = models.MLP(16, 32, 4)
    base = Identity.of({"lr": 0.1, "epochs": 3}, model, torch.ones(3))
    assert Identity.of({"lr": 0.1, "epochs": 9, "force_retrain": True}, model, torch.ones(3)).key == base.key
    others = [Identity.of({"lr": 0.2}, model, torch.ones(3)),
              Identity.of({"lr": 0.1}, model, torch.zeros(3)),
              Identity.of({"lr": 0.1}, models.MLP(16, 33, 4), torch.ones(3))]
    assert len({base.key, *(o.key for o in others)}) == 4


def test_custom_datasets_cannot_be_fingerprinted_by_accident():
    class Volumes(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return torch.zeros(1)

    with pytest.raises(TypeError, match="cannot fingerprint a Volumes.*pass its tensors"):
        cache.fingerprint(Volumes())


def test_a_search_on_other_data_keeps_a_study_of_its_own(tmp_path):
    def objective(trial):
        return trial.suggest_float("x", 0, 1)

    first = tune.optimize(objective, "s", 2, directory=tmp_path, key=torch.ones(3))
    other = tune.optimize(objective, "s", 2, directory=tmp_path, key=torch.zeros(3))
    again = tune.optimize(objective, "s", 2, directory=tmp_path, key=torch.ones(3))
    assert first.study_name != other.study_name == other.study_name
    assert tune.counts(other) == {"COMPLETE": 2}  # not continued from the first data's trials
    assert [t.params for t in again.trials] == [t.params for t in first.trials]


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.skipif(not PLANETOID.is_dir(), reason="needs ../shared/data/planetoid beside the repo")
def test_gnn_notebook_on_citeseer_then_cora_in_one_folder_trains_each_afresh(tmp_path):
    from kagglekit.tools.notebook_runner import run_notebook
    notebook, out = REPO / "notebooks" / "gnn_node_classification.ipynb", tmp_path / "gnn"
    runs = {}
    for name in ("CiteSeer", "Cora"):
        run_notebook(notebook, {"smoke": True, "data_dir": str(PLANETOID / name)}, output_dir=out,
                     progress=False)
        runs[name] = json.loads((out / "metrics.json").read_text())
    cora = runs["Cora"]
    for label in ("pretrain", "fit"):
        assert cora[label]["resumed_from"] is None and cora[label]["steps_this_session"] == cora[label]["steps"] > 0
    for name in ("pretrain", "gnn-seed0-fold0"):  # both runs' checkpoints remain, each in its own folder
        folders = [p for p in (out / "checkpoints" / name).iterdir() if list(p.glob("step-*.pt"))]
        assert len(folders) == 2, folders
    assert 0.0 <= cora["gnn"]["mean"] <= 1.0 and cora["search_gnn"]["trials"] == {"COMPLETE": 2}


def test_every_kernel_version_leaves_the_checkpoint_the_next_one_needs(tmp_path, monkeypatch):
    """v1 trains, v2 finds it finished in its input, v3 finds it in v2's output: no retraining
    every other version (v2 used to write nothing, so v3 started over)."""
    ds = datasets.tabular(256, features=16)
    previous = None
    for version in ("v1", "v2", "v3"):
        root = tmp_path / version
        (root / "working").mkdir(parents=True)
        (root / "input").mkdir()
        if previous is not None:  # Kaggle mounts the kernel's previous output, read-only
            shutil.copytree(previous, root / "input" / "notebooks" / "me" / "kernel")
        monkeypatch.setenv("KAGGLEKIT_ROOT", str(root))
        result = _fit(CheckpointManager(root / "working" / "checkpoints" / "mlp"), ds)
        assert result.stopped == ("completed" if version == "v1" else "already_complete"), version
        assert list((root / "working" / "checkpoints" / "mlp").rglob("step-*.pt")), version
        assert list((root / "working" / "checkpoints" / "mlp").rglob("step-*.json")), version
        previous = root / "working"
