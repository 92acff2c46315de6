"""Audio as an image: log-mel spectrograms computed on the batch's device.

BirdCLEF's winning recipe, every year: 5-second windows of 32 kHz audio turned into mel
spectrograms and fed to an image backbone. Computing them on the GPU, after the loader hands over
raw waveforms, keeps Kaggle's 4 vCPUs for decoding only. The definition is torchaudio's
``MelSpectrogram`` with its defaults (a periodic Hann window, centred frames with reflect padding,
the power spectrum, HTK mel filters without normalisation) followed by ``AmplitudeToDB`` with a
floor ``top_db`` below each spectrogram's peak; written here on ``torch.stft`` because torchaudio
has no build for the pinned CPU torch. tests/test_augment2d.py checks it against a plain NumPy
implementation of the same definition.
"""
from __future__ import annotations

import torch


def hz_to_mel(hz):
    return 2595.0 * torch.log10(1.0 + torch.as_tensor(hz, dtype=torch.float64) / 700.0)


def mel_filters(n_freqs: int, n_mels: int, sample_rate: int, fmin: float, fmax: float) -> torch.Tensor:
    """(n_freqs, n_mels) triangular HTK mel filters over the STFT's frequencies, unnormalised."""
    freqs = torch.linspace(0, sample_rate / 2, n_freqs, dtype=torch.float64)
    edges = 700.0 * (10 ** (torch.linspace(float(hz_to_mel(fmin)), float(hz_to_mel(fmax)), n_mels + 2,
                                           dtype=torch.float64) / 2595.0) - 1.0)
    slopes = edges.unsqueeze(0) - freqs.unsqueeze(1)  # (n_freqs, n_mels + 2)
    widths = edges[1:] - edges[:-1]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    return torch.clamp(torch.minimum(down, up), min=0).float()


class LogMel(torch.nn.Module):
    """``(N, samples)`` waveforms -> ``(N, 1, n_mels, frames)`` log-mel images, in dB below the peak."""
    window: torch.Tensor  # buffers: they follow the module to the batch's device
    filters: torch.Tensor

    def __init__(self, sample_rate: int = 32000, n_fft: int = 2048, hop: int = 512, n_mels: int = 128,
                 fmin: float = 50.0, fmax: float | None = 14000.0, top_db: float = 80.0):
        super().__init__()
        fmax = fmax if fmax is not None else sample_rate / 2
        if not 0 <= fmin < fmax <= sample_rate / 2:
            raise ValueError(f"fmin={fmin}, fmax={fmax}: 0 <= fmin < fmax <= half the sample rate "
                             f"({sample_rate / 2:g})")
        self.n_fft, self.hop, self.top_db = n_fft, hop, top_db
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        self.register_buffer("filters", mel_filters(n_fft // 2 + 1, n_mels, sample_rate, fmin, fmax), persistent=False)

    def forward(self, waves: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(waves.float(), self.n_fft, self.hop, window=self.window, center=True,
                          pad_mode="reflect", return_complex=True).abs().pow(2)  # (N, freqs, frames)
        mel = torch.matmul(spec.transpose(1, 2), self.filters).transpose(1, 2)  # (N, mels, frames)
        db = 10.0 * torch.log10(mel.clamp_min(1e-10))
        floor = db.amax(dim=(1, 2), keepdim=True) - self.top_db
        return torch.maximum(db, floor).unsqueeze(1)


def mask(spectrograms: torch.Tensor, time_masks: int = 2, time_width: float = 0.1, freq_masks: int = 2,
         freq_width: float = 0.1) -> torch.Tensor:
    """SpecAugment's masks (Park et al. 2019) on ``(N, C, mels, frames)``: per sample, bands of up to
    ``freq_width`` of the mels and stretches of up to ``time_width`` of the frames set to the
    sample's mean, drawn from torch's global CPU generator (saved in the kit's checkpoints: a
    resumed fit draws the same masks). Training only."""
    n, _, mels, frames = spectrograms.shape
    keep = torch.ones(n, 1, mels, frames, dtype=torch.bool)
    for count, width, size, axis in ((freq_masks, freq_width, mels, 2), (time_masks, time_width, frames, 3)):
        for _ in range(count):
            length = (torch.rand(n) * width * size).long()
            start = (torch.rand(n) * (size - length + 1)).long()
            at = torch.arange(size).unsqueeze(0)
            band = (at >= start.unsqueeze(1)) & (at < (start + length).unsqueeze(1))  # (N, size)
            keep &= ~(band.view(n, 1, size, 1) if axis == 2 else band.view(n, 1, 1, size))
    keep = keep.to(spectrograms.device)
    mean = spectrograms.mean(dim=(1, 2, 3), keepdim=True)
    return torch.where(keep, spectrograms, mean)


def band_statistics(specs: torch.Tensor, prepare=None, batch: int = 256):
    """Each window's mel bands' mean and spread over time, (N, 2 x mels) as a NumPy array, read
    ``batch`` windows at a time (``prepare``: the stored spectrograms as the model reads them, such
    as standardised float32): the features of the plain reference, a logistic regression."""
    prepare = prepare or (lambda s: s.float())
    parts = [prepare(specs[i:i + batch]) for i in range(0, len(specs), batch)]
    stats = [torch.cat([s.mean(-1), s.std(-1)], -1).flatten(1) for s in parts]
    return (torch.cat(stats) if stats else torch.zeros(0, 2 * specs.shape[2])).numpy()
