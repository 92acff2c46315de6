"""2-D augmentation on the batch's device, test-time augmentation, and log-mel spectrograms
(kagglekit/images/augment2d.py, mel.py) against plain references."""
import numpy as np
import pytest
import torch

from kagglekit.audio import mel
from kagglekit.images import augment2d

OFF = dict(hflip=0.0, degrees=0.0, zoom=(1.0, 1.0), shift=0.0, brightness=0.0, contrast=0.0)


def _images(n=6, seed=0):
    return torch.rand(n, 3, 24, 32, generator=torch.Generator().manual_seed(seed))


def test_nothing_drawn_leaves_the_images_and_a_certain_flip_is_a_flip():
    x, y = _images(), torch.arange(6) % 3
    same, targets = augment2d.Augment2d(**OFF)(x, y, 3)
    assert torch.allclose(same, x, atol=1e-5) and torch.equal(targets, torch.nn.functional.one_hot(y, 3).float())
    flipped, _ = augment2d.Augment2d(**{**OFF, "hflip": 1.0})(x, y, 3)
    assert torch.allclose(flipped, x.flip(-1), atol=1e-5)


def test_each_sample_draws_its_own_and_the_same_generator_state_draws_the_same():
    x = _images(1).expand(8, -1, -1, -1).contiguous()  # eight copies of one image
    aug = augment2d.Augment2d()
    torch.manual_seed(3)
    a, _ = aug(x, torch.zeros(8, dtype=torch.long), 2)
    torch.manual_seed(3)  # what a resume restores
    b, _ = aug(x, torch.zeros(8, dtype=torch.long), 2)
    assert torch.equal(a, b)
    assert len({tuple(img.flatten()[:50].tolist()) for img in a}) == 8  # eight different draws


def test_mixup_and_cutmix_make_soft_targets_that_match_what_was_mixed():
    x, y = _images(), torch.arange(6) % 3
    torch.manual_seed(0)
    mixed, soft = augment2d.Augment2d(**OFF, mixup=0.4)(x, y, 3)
    assert torch.allclose(soft.sum(1), torch.ones(6)) and not torch.equal(mixed, x)
    assert torch.allclose(mixed.mean(0), x.mean(0), atol=1e-5)  # a convex mix of a permutation keeps the mean
    torch.manual_seed(1)
    cut, soft = augment2d.Augment2d(**OFF, cutmix=1.0)(x, torch.eye(3)[y], 3)
    changed = ((cut - x).abs() > 1e-4).any(1).float().mean((1, 2))  # the pasted box's share of each image
    moved = soft.max(1).values < 1
    assert torch.allclose(1 - changed[moved], soft[moved].max(1).values, atol=0.05)
    with pytest.raises(ValueError, match="probabilities in"):
        augment2d.Augment2d(hflip=1.5)


def test_tta_averages_the_views_probabilities():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 24 * 32, 4))
    x = _images()
    expected = (torch.softmax(model(x), -1) + torch.softmax(model(x.flip(-1)), -1)) / 2
    assert torch.allclose(augment2d.tta(model, x), expected, atol=1e-6)
    with pytest.raises(ValueError, match="each of plain"):
        augment2d.tta(model, x, ("spin",))


def _reference_logmel(wave, sr, n_fft, hop, n_mels, fmin, fmax, top_db):
    """The same definition in plain NumPy: reflect-padded centred frames, a periodic Hann window,
    |rfft|^2, HTK triangles, dB with a floor top_db below the peak."""
    padded = np.pad(wave, n_fft // 2, mode="reflect")
    frames = np.stack([padded[i:i + n_fft] for i in range(0, len(padded) - n_fft + 1, hop)])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # (frames, freqs)
    to_mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    edges = 700 * (10 ** (np.linspace(to_mel(fmin), to_mel(fmax), n_mels + 2) / 2595) - 1)
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    bank = np.zeros((len(freqs), n_mels))
    for m in range(n_mels):
        lo, mid, hi = edges[m:m + 3]
        bank[:, m] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
    db = 10 * np.log10(np.maximum(power @ bank, 1e-10)).T
    return np.maximum(db, db.max() - top_db)


def test_the_log_mel_spectrogram_is_the_plain_definitions():
    sr = 32000
    t = np.arange(sr * 2) / sr
    wave = np.sin(2 * np.pi * (300 + 2000 * t) * t) + 0.1 * np.random.default_rng(0).normal(size=t.size)
    got = mel.LogMel(sr, n_fft=1024, hop=320, n_mels=64)(torch.from_numpy(wave).unsqueeze(0).float())
    expected = _reference_logmel(wave, sr, 1024, 320, 64, 50.0, 14000.0, 80.0)
    assert got.shape == (1, 1, 64, expected.shape[1])
    assert np.abs(got[0, 0].numpy() - expected).max() < 0.05  # dB; fp32 against fp64
    with pytest.raises(ValueError, match="half the sample rate"):
        mel.LogMel(sr, fmax=20000)
