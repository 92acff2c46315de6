"""The Vesuvius leaderboard score on hand-made volumes whose answer is known."""
import numpy as np
import pytest
import torch
from sklearn.metrics import mutual_info_score

from kagglekit import segment3d, surfacescore
from kagglekit.volumes.surfacescore import betti_counts, vesuvius_score


def sheet(n=48, z=20, thick=2) -> np.ndarray:
    """A flat sheet across the whole volume, ``thick`` voxels thick: labels 0 / 1."""
    volume = np.zeros((n, n, n), np.uint8)
    volume[z:z + thick] = 1
    return volume


def dice(pred, label) -> float:
    return segment3d.dice(torch.from_numpy(pred), torch.from_numpy(label))


def test_a_perfect_prediction_scores_one_on_every_part():
    label = sheet()
    label[:, :5] = 2  # an unlabelled slab
    assert vesuvius_score(label == 1, label) == pytest.approx(
        {"score": 1.0, "topo": 1.0, "surface_dice": 1.0, "voi": 1.0})
    empty = np.zeros((8, 8, 8), np.uint8)
    assert vesuvius_score(empty, empty)["score"] == pytest.approx(1.0)


def test_one_voxel_off_the_sheet_keeps_full_surface_dice():
    label = sheet()
    off = np.roll(label, 1, axis=0)
    result = vesuvius_score(off, label)
    assert result["surface_dice"] == 1.0 and result["topo"] == 1.0
    assert result["voi"] < 1.0  # the voxels' components still disagree where the sheets do not overlap
    assert vesuvius_score(np.roll(label, 3, axis=0), label)["surface_dice"] < 0.6  # beyond tau


def test_a_sheet_cut_in_two_loses_topology_and_voi_while_dice_barely_moves():
    label = sheet()
    cut = label.copy()
    cut[:, :, 10] = 0  # one voxel wide, inside the first octant (a cut on a tile's edge is not seen)
    whole, broken = vesuvius_score(label, label), vesuvius_score(cut, label)
    assert dice(cut, label) > 0.97
    assert broken["topo"] < whole["topo"] - 0.1
    assert broken["voi"] < whole["voi"] - 0.05
    assert broken["score"] < whole["score"] - 0.05


def test_a_hole_through_the_sheet_is_a_tunnel():
    label = sheet()
    holed = label.copy()
    holed[:, 8:10, 8:10] = 0
    assert betti_counts(holed[:24, :24, :24] == 1, label[:24, :24, :24] == 1)[1].tolist() == [0, 1, 0]
    result = vesuvius_score(holed, label)
    assert dice(holed, label) > 0.99 and result["topo"] < 0.9


def test_betti_numbers_of_known_shapes():
    shell = np.zeros((20, 20, 20), bool)
    shell[4:14, 4:14, 4:14] = True
    shell[7:11, 7:11, 7:11] = False  # a cavity
    ring = np.zeros((20, 20, 20), bool)
    ring[10, 4:14, 4:14] = True
    ring[10, 7:11, 7:11] = False  # a tunnel
    # rows: dimension 0, 1, 2; columns: matched, prediction's, label's
    assert betti_counts(shell, shell).tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 1]]
    assert betti_counts(ring, ring).tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 0]]
    assert betti_counts(ring, shell).tolist() == [[1, 1, 1], [0, 1, 0], [0, 0, 1]]
    apart = np.zeros((20, 20, 20), bool)
    apart[2:4, 2:4, 2:4] = apart[4:6, 4:6, 4:6] = True  # corner to corner: 6-connected, two components
    assert betti_counts(apart, apart)[0].tolist() == [2, 2, 2]


def test_unlabelled_voxels_never_change_the_score():
    rng = np.random.default_rng(0)
    label = sheet()
    label[:, :, 30:] = 2
    pred = (label == 1).astype(np.uint8)
    pred[10:14, 5:9, 3:7] = 1  # a false blob, scored
    noisy = pred.copy()
    noisy[label == 2] = rng.integers(0, 2, int((label == 2).sum()))
    assert vesuvius_score(noisy, label) == vesuvius_score(pred, label)
    assert vesuvius_score(pred, label)["score"] < 1.0


def test_voi_is_the_entropies_of_the_components():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 4, 500), rng.integers(0, 3, 500)
    split, merge = surfacescore.variation_of_information(a, b)
    entropy = lambda x: -(np.bincount(x) / len(x) * np.log(np.bincount(x) / len(x))).sum()  # noqa: E731
    assert split + merge == pytest.approx(entropy(a) + entropy(b) - 2 * mutual_info_score(a, b))
    assert split == pytest.approx(entropy(a) - mutual_info_score(a, b))


def test_a_prediction_of_another_shape_is_refused_by_name():
    with pytest.raises(ValueError, match="label of \\(8, 8, 8\\)"):
        vesuvius_score(np.zeros((8, 8, 9)), np.zeros((8, 8, 8)))


@pytest.mark.parametrize("tau", [2.0, 2.2, 1.5, 3.0])
def test_the_fast_tolerance_ball_is_the_exact_distance(tau):
    from scipy import ndimage

    from kagglekit.volumes.surfacescore import _near
    rng = np.random.default_rng(2)
    for shape in [(7, 9, 11), (2, 5, 5), (30, 20, 10)]:
        at = rng.random(shape) > 0.95
        assert (_near(at, tau) == (ndimage.distance_transform_edt(~at) <= tau)).all()


def test_validation_reports_the_mean_score_of_the_first_scored_patches():
    import kagglekit as kk
    rng = np.random.default_rng(3)
    labels = torch.from_numpy(rng.integers(0, 3, (6, 1, 8, 8, 8))).float()
    images = (labels == 1).float() * 0.8 + torch.from_numpy(rng.random((6, 1, 8, 8, 8))).float() * 0.3
    loader = [(images[i:i + 2], labels[i:i + 2]) for i in range(0, 6, 2)]
    model = lambda x: x * 4 - 2  # noqa: E731 - a "model" whose surface is the bright voxels
    loss = lambda logits, y: torch.tensor(0.0)  # noqa: E731
    expected = [vesuvius_score((images[i, 0] * 4 - 2 > 0).numpy(), labels[i, 0].numpy())["score"] for i in range(6)]
    scored = kk.segment3d.evaluator(loader, torch.device("cpu"), loss, scored=3)(model)
    assert scored["val_score"] == pytest.approx(np.mean(expected[:3]))  # batches 1 and 2, cut at 3
    assert kk.segment3d.evaluator(loader, torch.device("cpu"), loss, scored=100)(model)["val_score"] == \
        pytest.approx(np.mean(expected))
    assert "val_score" not in kk.segment3d.evaluator(loader, torch.device("cpu"), loss, scored=0)(model)
