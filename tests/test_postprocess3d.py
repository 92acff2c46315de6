"""Post-processing chosen on the leaderboard's score: specks removed by size, the threshold and
the speck filter picked where the score is best, probabilities stored as uint8 read the same."""
import numpy as np
import pytest

from kagglekit.volumes import postprocess3d


def sheet_with_specks(n=32, seed=0):
    """A label with one sheet, and a probability volume: the sheet at 0.9, a fainter false sheet
    at 0.45 (a threshold of 0.5 drops it) and bright one-voxel specks (only the size filter does)."""
    rng = np.random.default_rng(seed)
    label = np.zeros((n, n, n), np.uint8)
    label[10:12] = 1
    prob = np.zeros(label.shape, np.float32)
    prob[10:12] = 0.9
    prob[22:24] = 0.45
    specks = rng.integers(0, n, (40, 3))
    specks = specks[(specks[:, 0] > 14) & (specks[:, 0] < 20)]  # away from both sheets
    prob[tuple(specks.T)] = 0.95
    return prob, label


def test_components_under_the_size_are_removed_others_kept():
    mask = np.zeros((10, 10, 10), bool)
    mask[1:3, 1:3, 1:3] = True  # 8 voxels
    mask[6, 6, 6] = mask[7, 7, 7] = True  # diagonal neighbours: one 26-connected component of 2
    kept = postprocess3d.remove_small(mask, 3)
    assert kept[1:3, 1:3, 1:3].all() and not kept[6:8, 6:8, 6:8].any()
    assert postprocess3d.remove_small(mask, 2).sum() == 10 and postprocess3d.remove_small(mask, 0).sum() == 10


def test_uint8_probabilities_cut_where_float_ones_do():
    prob, _ = sheet_with_specks()
    stored = np.round(prob * 255).astype(np.uint8)
    for threshold in (0.3, 0.5, 0.7):
        assert np.array_equal(postprocess3d.to_mask(stored, threshold, 4), postprocess3d.to_mask(prob, threshold, 4))


def test_the_grid_picks_the_threshold_and_filter_that_score_best():
    prob, label = sheet_with_specks()
    chosen = postprocess3d.choose([prob], [label], thresholds=(0.4, 0.5), min_voxels=(0, 8))
    assert (chosen["threshold"], chosen["min_voxels"]) == (0.5, 8)  # the false sheet and the specks gone
    assert chosen["score"] == pytest.approx(1.0)
    worst = min(chosen["grid"], key=lambda row: row["score"])
    assert (worst["threshold"], worst["min_voxels"]) == (0.4, 0) and worst["score"] < 0.8
    assert len(chosen["grid"]) == 4 and {"topo", "surface_dice", "voi"} <= set(worst)


def test_choosing_without_validation_volumes_says_how_to_get_them():
    with pytest.raises(ValueError, match="val_fraction"):
        postprocess3d.choose([], [])
