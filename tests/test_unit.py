"""A unit of work: one key for its cache entry, checkpoint folder and study; "not finished" one
exception, carried back from a rank by type; run control not part of the key."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.model_selection import KFold
from torch.nn import functional as F

import kagglekit as kk

DECLARED = {"seed": 0, "force_retrain": False, "time_budget_s": 0.0, "precision": "auto", "data_dir": "",
            "lr": 0.1, "epochs": 1}


def _start(out, **values):
    os.environ["KAGGLEKIT_OUTPUT"] = str(out)
    namespace = {**DECLARED, **values}
    # epochs is run control, as a notebook's "# [run]" says
    return kk.start(namespace, "unit", declared=dict(DECLARED), verbose=False)


@pytest.fixture(autouse=True)
def _output_env():
    yield
    os.environ.pop("KAGGLEKIT_OUTPUT", None)


X = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()


class Net(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(), torch.nn.Linear(width, 2))

    def forward(self, x):
        return self.body(x)


def _train(run, unit, rows, width=8):
    torch.manual_seed(0)
    model = Net(width)
    loader = kk.make_loader(torch.utils.data.TensorDataset(X[rows], Y[rows]), 8, seed=0, num_workers=0)
    kk.fit(model, torch.optim.SGD(model.parameters(), lr=run.config["lr"]), loader, kk.supervised(F.cross_entropy),
           run=run, epochs=run.config["epochs"], checkpoints=unit.checkpoints(), progress=False)
    return model


def test_one_folds_cache_entry_checkpoint_folder_and_study_carry_one_key(tmp_path):
    run = _start(tmp_path / "out")
    cv = kk.folds.CrossValidation(run, "net", KFold(2, shuffle=True, random_state=0), n=40,
                                  data=[X, Y], code=[Net, _train])

    def train_fold(fold):
        kk.tune.best(lambda trial: trial.suggest_float("lr", 0.01, 0.1), "lr", 1, defaults={"lr": 0.1}, run=run,
                     study=fold.unit.study)
        model = _train(run, fold.unit, fold.train)
        with torch.no_grad():
            return kk.folds.Predictions(oof={"net": model(X[fold.val]).softmax(1)[:, 1].numpy()})
    assert cv.run(train_fold).complete
    out, fold = tmp_path / "out", cv.folds[0]
    key = fold.unit.key
    assert len(key) == 16 and (out / "cache" / fold.name / key / "meta.json").exists()
    assert list((out / "checkpoints" / fold.name / key).glob("step-*.json"))
    assert (out / "tune" / f"{fold.name}-{key}.db").exists()
    assert {p.name for p in (out / "checkpoints" / fold.name).iterdir()} == {key}  # one folder, that key

    def key_of(run, data=(X, Y), code=(Net, _train)):
        folds = kk.folds.CrossValidation(run, "net", KFold(2, shuffle=True, random_state=0), n=40,
                                         data=list(data), code=list(code))
        return folds.folds[0].unit.key
    assert key_of(run) == key
    assert key_of(run, data=(X + 1, Y)) != key  # the data's content
    assert key_of(run, code=(Net,)) != key  # the code
    assert key_of(_start(tmp_path / "out", lr=0.05)) != key  # a parameter that is not run control
    assert key_of(_start(tmp_path / "out", epochs=3)) == key  # run control: a longer run trains on
    assert key_of(_start(tmp_path / "out", time_budget_s=60.0)) == key


def test_a_unit_resumes_once_its_fit_saved_a_checkpoint_and_never_under_force_retrain(tmp_path):
    run = _start(tmp_path / "out")
    unit = run.unit("net", config=run.config, data=[X, Y], code=[Net, _train])
    assert not unit.resumes()  # nothing saved: a fit starts from the weights it is given
    _train(run, unit, np.arange(40))
    assert unit.resumes()
    assert not _start(tmp_path / "out", force_retrain=True).unit("net", config=run.config, data=[X, Y],
                                                                code=[Net, _train]).resumes()
    assert not run.unit("net", config=run.config, data=[X + 1, Y], code=[Net, _train]).resumes()  # other data


def test_a_unit_cut_short_raises_unfinished_stores_nothing_and_the_next_session_finishes_it(tmp_path):
    run = _start(tmp_path / "out", epochs=3)
    unit = run.unit("net", config=run.config, data=[X, Y], code=[Net, _train])
    run.deadline = 0.0  # the session's time is up before the first step
    with pytest.raises(kk.Unfinished, match=r"net: the session's time ran out at step \d+; saved .*"):
        unit.cached(lambda: _train(run, unit, np.arange(40)).state_dict())
    assert not unit.done and "cache:net" not in run.chain
    later = _start(tmp_path / "out", epochs=3)
    unit = later.unit("net", config=later.config, data=[X, Y], code=[Net, _train])
    unit.cached(lambda: _train(later, unit, np.arange(40)).state_dict())
    assert unit.done and later.chain["cache:net"] == "computed"
    longer = _start(tmp_path / "out", epochs=5)  # run control that shapes the result: recomputed, trains on
    unit = longer.unit("net", config=longer.config, data=[X, Y], code=[Net, _train])
    assert not unit.done
    unit.cached(lambda: _train(longer, unit, np.arange(40)).state_dict())
    assert longer.chain["cache:net"] == "computed" and unit.done


def test_another_model_in_a_units_folder_is_refused_with_the_fix(tmp_path):
    run = _start(tmp_path / "out")
    unit = run.unit("net", config=run.config, data=[X, Y], code="v1")  # the model's class not named
    _train(run, unit, np.arange(40))
    with pytest.raises(kk.resuming.UnitModelChanged, match=r"another model \(body.0.weight: .*Add it \(code="):
        _train(run, unit, np.arange(40), width=16)


def _stop_in_rank(run):
    raise kk.Unfinished(f"rank {run.rank}: the session's time ran out")


@pytest.mark.slow
def test_launch_carries_unfinished_back_from_a_rank_by_type(tmp_path):
    run = _start(tmp_path / "out")
    with pytest.raises(kk.Unfinished, match="rank 0: the session's time ran out"):
        kk.launch(_stop_in_rank, run=run, nprocs=2, strategy="ddp")


NOTEBOOK = '''
import functools

import numpy as np

SCALE = {scale}


class Model:
    def forward(self, x):
        return helper(x) * SCALE


@functools.cache
def helper(x):
    return np.mean(x) {op} 1


def train(rows):
    return [Model().forward(r) for r in rows]


def plot(rows):
    return "unrelated {plot}"


fitted = Model()  # a value a cell built from the notebook's class


def predict(rows):
    return [fitted.forward(r) for r in rows]


def double(x):
    return 2 * x


def half(x):
    return x / 2


steps = [double, half, helper, plot]  # one statement that loads several of the notebook's functions


def pipeline(x):
    for step in steps:
        x = step(x)
    return x
'''


def _notebook(tmp_path, name: str, op: str = "+", plot: str = "a", scale: str = "2.0"):
    """A notebook's functions as a module of their own (IPython keeps a cell's source where
    inspect finds it, as a file does)."""
    import importlib.util
    path = tmp_path / f"{name}.py"
    path.write_text(NOTEBOOK.replace("{op}", op).replace("{plot}", plot).replace("{scale}", scale))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where its top-level statements are found, as a notebook's __main__ is
    spec.loader.exec_module(module)
    return module


def test_a_units_code_is_what_its_function_reaches_in_the_notebook(tmp_path):
    """code=train names train, the class it builds and the (decorated) helper that class calls:
    editing the helper changes the key (a hand-kept [Model, train] missed it and kept a stale
    result), editing a function train never reaches does not, and numpy's code is not followed."""
    base = _notebook(tmp_path, "nb_a")
    assert [f.__name__ for f in kk.keys.reached([base.train])] == ["train", "Model", "helper"]
    version = kk.keys.code_version(base.train)
    assert kk.keys.code_version(_notebook(tmp_path, "nb_b", plot="b").train) == version
    assert kk.keys.code_version(_notebook(tmp_path, "nb_c", op="-").train) != version
    assert kk.keys.code_version([base.train, base.Model]) == version  # each reached once


def test_a_units_key_holds_the_statements_that_made_the_values_its_code_reads(tmp_path):
    """The image notebook's gap: its fold units read the normalisation a cell computed, and an edit
    of that cell served the old folds from the cache. A top-level statement the code reads through a
    value (SCALE, read by Model.forward) is the unit's identity, comments and spacing aside; so is the
    class a value was built from (``fitted = Model()``, read by predict) and what that class calls."""
    def keyed(module, root: str):
        run = _start(tmp_path / f"out-{module.__name__}-{root}")
        return run.unit("u", code=getattr(module, root)).key, run.metrics["units"]["u"]

    base, record = keyed(_notebook(tmp_path, "nb_s"), "train")
    assert "SCALE = 2.0" in record["statements"]
    assert keyed(_notebook(tmp_path, "nb_t", scale="3.0"), "train")[0] != base
    assert keyed(_notebook(tmp_path, "nb_u", scale="2.0  # the same value, said again"), "train")[0] == base
    assert keyed(_notebook(tmp_path, "nb_v", plot="b"), "train")[0] == base
    predicting, record = keyed(_notebook(tmp_path, "nb_w"), "predict")
    assert record["statements"] == ["SCALE = 2.0", "fitted = Model()"]  # in the order they ran
    assert keyed(_notebook(tmp_path, "nb_x", op="-"), "predict")[0] != predicting  # helper, via Model
    assert keyed(_notebook(tmp_path, "nb_y", scale="3.0"), "predict")[0] != predicting  # SCALE, via Model


KEY_IN_A_NEW_PROCESS = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import test_unit
folder = Path(sys.argv[2])
print(test_unit._start(folder / "out").unit("u", code=test_unit._notebook(folder, "nb_p").pipeline).key)
"""


def test_a_units_key_is_the_same_in_every_process_whatever_its_hash_seed(tmp_path):
    """The next kernel version is a new process with its own string hashes: a key that followed a set's
    order (the names a statement loads) was another key there, and every unit trained again."""
    import subprocess
    keys = {subprocess.run([sys.executable, "-c", KEY_IN_A_NEW_PROCESS, str(Path(__file__).parent), str(tmp_path)],
                           env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True,
                           check=True).stdout.strip() for seed in ("1", "2", "3")}
    assert len(keys) == 1, keys


def test_a_units_config_holds_values_and_leave_out_needs_a_parameter_and_its_reason(tmp_path):
    run = _start(tmp_path / "out", lr=0.05)
    with pytest.raises(kk.unit.IdentityError, match=r"config= holds the values handed to it .* \(got a tuple\)"):
        run.unit("pre", config=("lr", "seed"), data=[X], code=_train)
    unit = run.unit("pre", config={"width": 8}, data=[X], code=_train)
    assert unit.config == {"lr": 0.05, "epochs": 1, "precision": "auto", "seed": 0, "width": 8,
                           "handed": {"_train.width": 8}}  # its default: a value handed to it
    with pytest.raises(kk.unit.IdentityError, match=r"leave_out names 'lrr', not a parameter"):
        run.unit("pre", code=_train, leave_out={"lrr": "a typo"})
    with pytest.raises(kk.unit.IdentityError, match=r"leave_out=\{'lr': ...\} needs its reason"):
        run.unit("pre", code=_train, leave_out={"lr": " "})
    left = run.unit("pre", code=_train, leave_out={"lr": "the test says so"})
    assert "lr" not in left.config and left.key != unit.key
    recorded = run.metrics["units"]["pre"]
    assert recorded["left_out"] == {"lr": "the test says so"} and "lr" not in recorded["parameters"]
    assert recorded["parameters"]["epochs"] == "_train -> run.config"


def _objective_of(defaults: dict, model):
    def objective(trial):
        return {**defaults, **trial}, model
    return objective


def test_the_plain_values_a_units_code_closes_over_are_in_its_key(tmp_path):
    """A search's objective closing over its model's defaults (the tabular notebook's): other
    defaults, another key; what is not plain data (a model object) is not a value of the key."""
    run = _start(tmp_path / "out")
    keyed = {lr: run.unit("search", code=_objective_of({"lr": lr}, Net())).key for lr in (0.1, 0.2)}
    assert keyed[0.1] != keyed[0.2]
    assert run.unit("search", code=_objective_of({"lr": 0.1}, Net())).key == keyed[0.1]
    assert run.metrics["units"]["search"]["config"]["handed"] == {"_objective_of.<locals>.objective.defaults":
                                                                   {"lr": 0.1}}


def _reads_data_dir(run):
    return run.config["data_dir"]


SHIFT = np.arange(3)  # a value the unit's code (_train) never reads


def _reads_shift():
    return (SHIFT + 1).tolist()


def test_the_work_a_unit_runs_may_read_no_parameter_its_key_lacks(tmp_path):
    """A unit named by one function, whose work calls another reading a parameter the first does not:
    refused by name before it runs (a change of that parameter would be served the stale result)."""
    run = _start(tmp_path / "out")
    unit = run.unit("pre", code=_train, data=[X])
    with pytest.raises(kk.unit.IdentityError, match=r"unit 'pre': its work reads data_dir \(<lambda> -> "
                                                    r"_reads_data_dir -> run.config\), which its key does not hold"):
        unit.cached(lambda: _reads_data_dir(run))
    assert "cache:pre" not in run.chain  # nothing ran
    with pytest.raises(kk.unit.IdentityError, match=r"unit 'pre': its work reads what this statement of the notebook "
                                                    r"made, which its key does not hold: SHIFT = np.arange\(3\)"):
        unit.cached(_reads_shift)  # an edit of SHIFT's line would be served the stale result
    assert "cache:pre" not in run.chain
    assert run.unit("all", data=[X]).config == run.config  # without code=: every parameter
