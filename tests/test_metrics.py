"""The kit's scores equal scikit-learn's, ties and DDP included."""
import numpy as np
import pytest
import torch
from sklearn import metrics as sk

import kagglekit as kk
from kagglekit import metrics, segment3d
from kagglekit.parallel.launcher import launch


def _tied(seed: int, n: int = 1000):
    """Scores rounded to one decimal (heavy ties, as fp16 logits give) and 5% positives."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.05).astype(int)
    scores = np.round(rng.random(n) * 0.7 + 0.3 * labels, 1)
    return torch.tensor(scores, dtype=torch.float32), torch.tensor(labels)


@pytest.mark.parametrize("seed", range(5))
def test_pr_auc_with_heavily_tied_scores_is_scikit_learns(seed):
    scores, labels = _tied(seed)
    assert len(torch.unique(scores)) <= 11  # ties everywhere
    expected = sk.average_precision_score(labels.numpy(), scores.numpy())
    assert abs(metrics.average_precision(scores, labels) - expected) < 1e-9
    precision, recall = metrics.pr_curve(scores, labels)
    p_ref, r_ref, _ = sk.precision_recall_curve(labels.numpy(), scores.numpy())
    np.testing.assert_array_equal(precision, p_ref)
    np.testing.assert_array_equal(recall, r_ref)


def test_the_order_of_tied_rows_does_not_change_the_score():
    scores, labels = _tied(0)
    flipped = metrics.average_precision(scores.flip(0), labels.flip(0))
    assert flipped == pytest.approx(metrics.average_precision(scores, labels), abs=1e-12)


def test_binary_and_multiclass_scores_are_scikit_learns():
    scores, labels = _tied(1)
    out = metrics.binary(scores - 0.5, labels)
    assert out["roc_auc"] == pytest.approx(sk.roc_auc_score(labels, scores), abs=1e-12)
    assert out["f1"] == pytest.approx(sk.f1_score(labels, scores >= 0.5), abs=1e-12)
    rng = np.random.default_rng(0)
    logits, y = rng.normal(size=(300, 4)), rng.integers(0, 4, 300)
    multi = metrics.classification(torch.tensor(logits), torch.tensor(y))
    assert multi["accuracy"] == pytest.approx(sk.accuracy_score(y, logits.argmax(1)))
    assert multi["f1_macro"] == pytest.approx(sk.f1_score(y, logits.argmax(1), average="macro"))
    onehot = np.eye(4)[y]
    assert multi["pr_auc"] == pytest.approx(sk.average_precision_score(onehot, logits, average="macro"))


def test_no_positive_gives_nan_not_a_flattering_number():
    assert np.isnan(metrics.average_precision(torch.rand(10), torch.zeros(10)))
    assert np.isnan(metrics.roc_auc(torch.rand(10), torch.zeros(10)))


def test_half_precision_scores_are_warned_about(monkeypatch):
    monkeypatch.setattr(metrics, "_warned_half", False)
    scores, labels = _tied(2)
    with pytest.warns(UserWarning, match="float16.*outside autocast"):
        metrics.average_precision(scores.half(), labels)


def test_regression_scores_are_scikit_learns():
    rng = np.random.default_rng(0)
    pred, truth = rng.normal(size=(50, 12)), rng.normal(size=(50, 12))
    out = metrics.regression(torch.tensor(pred), torch.tensor(truth))
    assert out["mae"] == pytest.approx(sk.mean_absolute_error(truth.ravel(), pred.ravel()))
    assert out["rmse"] == pytest.approx(np.sqrt(((pred - truth) ** 2).mean()))


def test_the_kits_dice_equals_scikit_learns_binary_f1():
    g = torch.Generator().manual_seed(0)
    pred, truth = torch.rand(8, 8, 8, generator=g) > 0.6, torch.rand(8, 8, 8, generator=g) > 0.7
    assert segment3d.dice(pred, truth) == pytest.approx(
        sk.f1_score(truth.numpy().ravel(), pred.numpy().ravel()), abs=1e-6)


def _score_my_shard(index_of_rank: dict):
    """Each rank holds a different number of rows (and rank 1 a padded repeat)."""
    scores, labels = _tied(3)
    index = index_of_rank[kk.ranks.rank()]
    s, y = metrics.gather(scores[index], labels[index], index=index)
    return metrics.average_precision(s, y), len(s)


def test_scores_from_two_ranks_of_unequal_size_equal_the_single_process_value():
    shards = {0: torch.arange(0, 600), 1: torch.cat([torch.arange(600, 1000), torch.tensor([5])])}
    ddp_score, rows = launch(_score_my_shard, shards, nprocs=2)
    scores, labels = _tied(3)
    assert rows == 1000  # every row once: the repeat was dropped
    assert ddp_score == pytest.approx(metrics.average_precision(scores, labels), abs=1e-12)
    # What averaging per-rank scores would have given instead: not the same number.
    per_rank = [metrics.average_precision(scores[i], labels[i]) for i in (shards[0], shards[1][:-1])]
    assert abs(sum(per_rank) / 2 - ddp_score) > 1e-3


# ---- several labels per row ----------------------------------------------------------------------
def test_multi_label_scores_are_scikit_learns_and_the_threshold_is_the_best_of_its_grid():
    from sklearn.metrics import f1_score, roc_auc_score

    from kagglekit.readers import labelsets
    from kagglekit.score import multilabel, scoring
    rng = np.random.default_rng(0)
    y = (rng.random((300, 6)) < 0.3).astype(int)
    y[y.sum(1) == 0, 0] = 1  # every row shows a label, as a competition's do
    p = np.clip(y * 0.5 + rng.random(y.shape) * 0.6, 0, 1)
    assert metrics.macro_roc_auc(p, y) == pytest.approx(roc_auc_score(y, p, average="macro"))
    chosen = labelsets.predicted(p, 0.5)
    assert multilabel.samples_f1(y, p, 0.5) == pytest.approx(f1_score(y, chosen, average="samples"))
    best = multilabel.best_threshold(y, p)
    assert all(multilabel.samples_f1(y, p, best) >= multilabel.samples_f1(y, p, t) for t in multilabel.THRESHOLDS)
    f1 = scoring.get("F1", 6, multilabel=True)
    assert (f1.task, f1.higher_is_better) == ("multilabel", True)
    assert f1.score(y, p) == pytest.approx(multilabel.samples_f1(y, p, best))
    assert scoring.get("roc_auc", 6, multilabel=True).score(y, p) == pytest.approx(metrics.macro_roc_auc(p, y))
    y[:, 2] = 0  # a label no row shows here has no AUC: left out of the mean, not a crash
    assert metrics.macro_roc_auc(p, y) == pytest.approx(roc_auc_score(y[:, [0, 1, 3, 4, 5]], p[:, [0, 1, 3, 4, 5]]))
    with pytest.raises(scoring.MetricError, match="does not score several labels per row: use auc or f1"):
        scoring.get("accuracy", 6, multilabel=True)


def test_a_multi_label_probe_on_folds_is_one_plain_fit_per_fold_and_a_label_unseen_in_training_scores_0():
    from types import SimpleNamespace

    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    from kagglekit.score import multilabel
    rng = np.random.default_rng(1)
    x, x_test = rng.normal(size=(120, 5)), rng.normal(size=(30, 5))
    y = (x[:, :4] + rng.normal(scale=0.5, size=(120, 4)) > 0.8).astype(int)
    y[:40, 3] = 0  # fold 0 validates on the only rows showing label 3: its training rows never show it
    y[:40, 3][:5] = 1
    y[40:, 3] = 0
    folds = [SimpleNamespace(train=np.arange(40, 120), val=np.arange(40)),
             SimpleNamespace(train=np.arange(40), val=np.arange(40, 120))]
    make = lambda: OneVsRestClassifier(LogisticRegression())  # noqa: E731
    oof, test = multilabel.on_folds(make, x, y, x_test, folds)
    plain = make().fit(x[40:], y[40:, :3])
    assert np.allclose(oof[:40, :3], plain.predict_proba(x[:40])) and (oof[:40, 3] == 0).all()
    second = make().fit(x[:40], y[:40])
    assert np.allclose(oof[40:], second.predict_proba(x[40:]))
    first_test = np.column_stack([plain.predict_proba(x_test), np.zeros(30)])
    assert np.allclose(test, (first_test + second.predict_proba(x_test)) / 2)
    assert multilabel.on_folds(make, x, y, x_test[:0], folds)[1].shape == (0, 4)


def test_a_metric_whose_submission_the_sample_cannot_hold_is_refused_before_training():
    import pandas as pd

    from kagglekit.score import scoring
    numbers, words = pd.DataFrame({"id": [1, 2], "target": [6, 3]}), pd.DataFrame({"id": [1], "target": ["Extrovert"]})
    with pytest.raises(scoring.MetricError, match=r"metric='map@3' writes three labels separated by spaces per row, "
                                                  r"but sample_submission.csv's 'target' holds numbers \('6'\)"):
        scoring.get("map@3", 7).check_sample(numbers, "target")
    with pytest.raises(scoring.MetricError, match="metric='auc' writes a probability per row, .* holds text"):
        scoring.get("auc", 2).check_sample(words, "target")
    with pytest.raises(scoring.MetricError, match="metric='rmse' writes a value per row"):
        scoring.get("rmse").check_sample(words, "target")
    scoring.get("accuracy", 2).check_sample(words, "target")  # a label: words or numbers
    scoring.get("map@3", 7).check_sample(pd.DataFrame({"id": [1], "target": ["a b c"]}), "target")
    scoring.get("auc", 2).check_sample(numbers, "target")
    scoring.get("logloss", 3).check_sample(pd.DataFrame({"id": [1], "a": [0.3], "b": [0.7]}), "target")
