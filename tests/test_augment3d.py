"""3-D augmentation of training patches, and test-time rotations turned back."""
import pytest
import torch
from torch import nn

from kagglekit import segment3d
from kagglekit.volumes.augment3d import Augment3d


def batch(n=64, edge=6):
    """Labels with no symmetry (a random 0 / 1 / 2 volume), images a function of them."""
    labels = torch.randint(0, 3, (n, 1, edge, edge, edge)).float()
    return labels * 0.25 + 0.1, labels


def test_labels_move_with_their_images_and_keep_their_values():
    images, labels = batch()
    torch.manual_seed(0)
    moved_x, moved_y = Augment3d(scale=0.0, shift=0.0)(images, labels)
    assert torch.equal(moved_x, moved_y * 0.25 + 0.1)  # the same flips and turns, voxel for voxel
    assert sorted(moved_y.unique().tolist()) == [0.0, 1.0, 2.0]
    assert not torch.equal(moved_y, labels)


def test_every_flip_and_axial_turn_is_drawn():
    images, labels = batch(n=400, edge=4)
    torch.manual_seed(1)
    _, moved = Augment3d(scale=0.0, shift=0.0)(images, labels)
    views = {}
    for original, out in zip(labels, moved):
        for flips in range(8):
            axes = [1 + a for a in range(3) if flips >> a & 1]
            for k in range(4):
                if torch.equal((original.flip(axes) if axes else original).rot90(k, (2, 3)), out):
                    views[(flips, k)] = views.get((flips, k), 0) + 1
    # 8 flips x 4 turns: 32 draws, 16 distinct views (a half turn is the y and x flips together),
    # so every (flips, turn) pair matches some output only when all 16 views were drawn
    assert len(views) == 32


def test_intensity_changes_images_within_bounds_never_labels():
    images, labels = torch.full((32, 1, 4, 4, 4), 0.5), torch.ones(32, 1, 4, 4, 4)
    torch.manual_seed(2)
    x, y = Augment3d(flips=False, rotations=False, scale=0.2, shift=0.1)(images, labels)
    per_sample = x.flatten(1)
    assert torch.all(per_sample.std(1) == 0) and torch.equal(y, labels)  # one gain and offset per sample
    assert per_sample[:, 0].min() >= 0.5 * 0.8 - 0.1 and per_sample[:, 0].max() <= 0.5 * 1.2 + 0.1
    assert per_sample[:, 0].std() > 0.03


def test_a_resumed_run_draws_the_same_augmentations():
    images, labels = batch()
    torch.manual_seed(3)
    first = Augment3d()(images, labels)
    torch.manual_seed(3)  # what restoring a checkpoint's RNG state does
    assert all(torch.equal(a, b) for a, b in zip(first, Augment3d()(images, labels)))


def test_all_planes_turn_cubic_patches_only():
    images, labels = batch(n=200, edge=4)
    torch.manual_seed(4)
    _, moved = Augment3d(all_planes=True, flips=False, scale=0.0, shift=0.0)(images, labels)
    axial = {(i, k) for i in range(200) for k in range(4) if torch.equal(labels[i].rot90(k, (2, 3)), moved[i])}
    assert len({i for i, _ in axial}) < 150  # others turned in (z, y) or (z, x)
    flat = torch.zeros(8, 1, 2, 4, 4), torch.zeros(8, 1, 2, 4, 4)
    assert Augment3d(all_planes=True)(*flat)[0].shape == (8, 1, 2, 4, 4)


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="scale=-0.1"):
        Augment3d(scale=-0.1)
    with pytest.raises(ValueError, match="\\(N, C, D, H, W\\)"):
        Augment3d()(torch.zeros(2, 4, 4, 4), torch.zeros(2, 4, 4, 4))


@pytest.mark.parametrize("flips,rotations", [(3, 3), (0, 2), (1, 1)])
def test_test_time_views_are_turned_back_before_averaging(flips, rotations):
    torch.manual_seed(5)
    model = nn.Conv3d(1, 1, 1)  # voxel-wise: any view, turned back, gives the plain prediction
    volume = torch.rand(1, 12, 12, 12)
    plain = segment3d.sliding_window(model, volume, 8)
    assert torch.allclose(segment3d.sliding_window(model, volume, 8, flips=flips, rotations=rotations),
                          plain, atol=1e-6)
    shifted = nn.Conv3d(1, 1, 3, padding=1)  # not symmetric: the views differ, the average moves
    assert not torch.allclose(segment3d.sliding_window(shifted, volume, 8, rotations=rotations or 1),
                              segment3d.sliding_window(shifted, volume, 8), atol=1e-4)
    with pytest.raises(ValueError, match="rotations=4"):
        segment3d.sliding_window(model, volume, 8, rotations=4)
