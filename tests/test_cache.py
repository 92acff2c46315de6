import json

import pytest
import torch

from kagglekit import cache as cache_mod, inputs, models
from kagglekit.state.cache import Cache, CacheWarning

CONFIG = {"lr": 0.01, "hidden": 16, "epochs": 3}


class Counter:
    """A stand-in for training: counts how often it really ran."""

    def __init__(self):
        self.calls = 0

    def __call__(self, value=1.0):
        self.calls += 1
        return {"weight": torch.full((4,), float(value)), "score": torch.tensor(0.5)}


@pytest.fixture
def data():
    return torch.utils.data.TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6))


def test_same_inputs_hit_and_skip_the_work(tmp_path, data):
    c, train = Cache(tmp_path), Counter()
    first = c.get("m", CONFIG, train, data=data, code=models.MLP)
    second = c.get("m", dict(reversed(list(CONFIG.items()))), train, data=data, code=models.MLP)
    assert train.calls == 1 and torch.equal(first["weight"], second["weight"])
    report = c.stats()
    assert (report["hits"], report["misses"]) == (1, 1) and report["seconds_saved"] >= 0


def test_config_data_and_code_changes_each_miss(tmp_path, data):
    c, train = Cache(tmp_path), Counter()
    c.get("m", CONFIG, train, data=data, code="v1")
    c.get("m", {**CONFIG, "lr": 0.02}, train, data=data, code="v1")
    changed = torch.utils.data.TensorDataset(data.tensors[0] + 1e-3, data.tensors[1])
    c.get("m", CONFIG, train, data=changed, code="v1")
    c.get("m", CONFIG, train, data=data, code="v2")
    assert train.calls == 4


def test_no_false_hit_across_many_mutations(tmp_path):
    x = torch.randn(32, 3)
    variants = [
        (CONFIG, x, "v1"), ({**CONFIG, "epochs": 4}, x, "v1"), ({**CONFIG, "extra": None}, x, "v1"),
        (CONFIG, x.clone().index_put_((torch.tensor([5]),), torch.zeros(1, 3)), "v1"),
        (CONFIG, x.double(), "v1"), (CONFIG, x[:31], "v1"), (CONFIG, x.reshape(3, 32), "v1"),
        (CONFIG, [x, x], "v1"), (CONFIG, (x, x), "v1"), (CONFIG, x, "v1 "), (CONFIG, x, models.MLP),
        (CONFIG, x, models.MLP.forward), ({"lr": "0.01", "hidden": 16, "epochs": 3}, x, "v1")]
    keys = [cache_mod.key(cfg, d, code) for cfg, d, code in variants]
    assert len(set(keys)) == len(keys)
    assert cache_mod.key(*variants[0]) == keys[0]  # and it is stable


def test_files_are_fingerprinted_by_content(tmp_path):
    f = tmp_path / "train.csv"
    f.write_text("a,b\n1,2\n")
    before = cache_mod.fingerprint(tmp_path)
    f.write_text("a,b\n1,3\n")
    assert cache_mod.fingerprint(tmp_path) != before


def test_a_corrupted_entry_is_reported_and_recomputed(tmp_path, data):
    c, train = Cache(tmp_path), Counter()
    c.get("m", CONFIG, train, data=data)
    payload = next(tmp_path.rglob("value.pt"))
    payload.write_bytes(payload.read_bytes()[:-20])
    with pytest.warns(CacheWarning, match="sha256 mismatch"):
        value = c.get("m", CONFIG, train, data=data)
    assert train.calls == 2 and torch.equal(value["weight"], torch.ones(4))
    assert c.get("m", CONFIG, train, data=data) and train.calls == 2  # healthy again


def test_hit_in_an_attached_input_is_used_and_copied_over(tmp_path, kaggle_tree, data):
    previous = kaggle_tree / "input" / "notebooks" / "me" / "forecast" / "cache"
    Cache(previous).get("m", CONFIG, Counter(), data=data)
    inputs.forget()  # the next kernel version: its inputs are walked afresh
    c, train = Cache(kaggle_tree / "working" / "cache"), Counter()
    value = c.get("m", CONFIG, train, data=data)
    assert train.calls == 0 and torch.equal(value["weight"], torch.ones(4))
    assert c.stats()["entries"][0]["from"].startswith(str(previous))
    copied = list((kaggle_tree / "working" / "cache" / "m").glob("*/meta.json"))
    assert len(copied) == 1  # the next kernel version finds it in its own output


def test_force_recomputes_and_overwrites(tmp_path, data):
    Cache(tmp_path).get("m", CONFIG, lambda: Counter()(1.0), data=data)
    forced = Cache(tmp_path, force=True)
    value = forced.get("m", CONFIG, lambda: Counter()(7.0), data=data)
    assert torch.equal(value["weight"], torch.full((4,), 7.0))
    assert forced.stats()["misses"] == 1
    again = Cache(tmp_path).get("m", CONFIG, Counter(), data=data)
    assert torch.equal(again["weight"], torch.full((4,), 7.0))


def test_values_are_stored_in_formats_that_cannot_run_code(tmp_path):
    import numpy as np
    import xgboost
    c = Cache(tmp_path)
    c.get("scores", CONFIG, lambda: {"mae": 1.5, "rmse": [1, 2]})
    train = xgboost.DMatrix(np.random.rand(50, 3), label=np.random.rand(50))
    model = xgboost.train({"max_depth": 2}, train, num_boost_round=5)
    booster = c.get("xgb", CONFIG, lambda: model)
    assert isinstance(booster, xgboost.Booster)
    names = sorted(p.name for p in tmp_path.rglob("value.*"))
    assert names == ["value.json", "value.ubj"]
    meta = json.loads(next(tmp_path.rglob("meta.json")).read_text())
    assert len(meta["sha256"]) == 64
    hit = Cache(tmp_path).get("xgb", CONFIG, lambda: pytest.fail("should hit"))
    x = xgboost.DMatrix(np.random.rand(4, 3))
    assert np.allclose(hit.predict(x), booster.predict(x))


def test_a_lightgbm_model_is_cached_as_its_text_model_and_predicts_the_same_after_reload(tmp_path):
    import lightgbm
    import numpy as np
    rng = np.random.default_rng(0)
    x, y = rng.random((300, 4)), rng.random(300)
    model = lightgbm.train({"num_leaves": 7, "verbose": -1}, lightgbm.Dataset(x, y), 20)
    booster = Cache(tmp_path).get("lgb", CONFIG, lambda: model)
    payload = next(tmp_path.rglob("value.*"))
    assert payload.name == "value.txt"
    assert payload.read_text().startswith("tree\nversion=")  # LightGBM's own format, no pickle
    hit = Cache(tmp_path).get("lgb", CONFIG, lambda: pytest.fail("should hit"))
    assert isinstance(hit, lightgbm.Booster) and isinstance(booster, lightgbm.Booster)
    assert np.allclose(hit.predict(x[:20]), model.predict(x[:20]))
    payload.write_text(payload.read_text().replace("tree\n", "", 1))  # the sha256 no longer fits
    with pytest.warns(CacheWarning):
        again = Cache(tmp_path).get("lgb", CONFIG, lambda: model)
    assert np.allclose(again.predict(x[:20]), model.predict(x[:20]))
