"""Can the image notebook's loader feed a T4 on photographs of a real competition's size?

Writes JPEG photographs of mixed sizes (about 500 x 380 to 800 x 600, quality 90: what plant,
satellite and medical competitions ship) in the image layout, then measures images/s, each in the
same run:

- decoded per epoch in loader workers: a Dataset that opens, decodes and resizes each image on
  every read (the usual PyTorch pipeline), at 0, 1, 2 and 4 workers;
- decoded once: ``kk.images.decode_all`` into one uint8 array (the notebook's unit: the next
  version decodes nothing), its one-time rate at 4 processes, then batches read from memory;
- on the GPU (``torchvision.io.decode_jpeg(device="cuda")``): not measured here (no torchvision
  for the pinned CPU torch, no GPU); said, not assumed.

What one T4 consumes: the notebook's CNN (its own cell) at the photographs' input size costs F
FLOPs per image for a forward and backward (``torch.utils.flop_counter``); a T4 sustains about
24 TFLOPS in fp16 (``kk.cards.T4.fp16_flops``). Small convolutions reach less than a large
GEMM, so 24e12 / F images/s is an upper bound on the demand: a ratio >= 1 against it means the
GPU, not the loader, sets the pace. The notebook's ranks get ``loaders.workers_per_process(2, 4)``
workers each on Kaggle's 4 vCPUs.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from patch_loader import samples_per_s  # the same epochs timed the same way
from torch import nn

import kagglekit as kk

REPO = Path(__file__).resolve().parents[1]
T4_FP16_FLOPS = kk.cards.T4.fp16_flops


def notebook_cnn():
    """The image notebook's CNN, from its own cell."""
    ns = {"torch": torch, "nn": nn, "kk": kk, "tta": "plain", "hflip": 0.0, "degrees": 0.0, "mixup": 0.0}
    for cell in json.loads((REPO / "notebooks" / "image_classification.ipynb").read_text())["cells"]:
        source = "".join(cell["source"])
        if "class CNN(" in source:
            exec(compile(source.split("augment = ")[0], "image_classification.ipynb", "exec"), ns)
    return ns["CNN"]


def flops_per_image(cnn, size: int, width: int, classes: int) -> float:
    from torch.utils.flop_counter import FlopCounterMode
    model = cnn(classes, width)
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, size, size)).sum().backward()
    return float(counter.get_total_flops())


def write_photos(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """Photographs of smooth colour fields and texture (JPEG compresses them as it does real ones)."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        w, h = int(rng.integers(500, 801)), int(rng.integers(380, 601))
        low = rng.random((h // 16 + 1, w // 16 + 1, 3))
        field = np.kron(low, np.ones((16, 16, 1)))[:h, :w] * 200 + rng.normal(0, 18, (h, w, 3))
        path = folder / f"{i:05d}.jpg"
        Image.fromarray(np.clip(field, 0, 255).astype(np.uint8)).save(path, quality=90)
        paths.append(path)
    return paths


class DecodeEachRead(torch.utils.data.Dataset):
    def __init__(self, paths: list[Path], size: int):
        self.paths, self.size = paths, size

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return torch.from_numpy(kk.images.decode(self.paths[i], self.size)), 0


def images_per_s(dataset, batch: int, workers: int) -> float:
    return samples_per_s(kk.make_loader(dataset, batch, seed=0, num_workers=workers))


def main() -> None:
    import warnings
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # 4 workers on 2 cores, on purpose
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=384)
    ap.add_argument("--size", type=int, default=224, help="the side images are resized to (a photo competition's)")
    ap.add_argument("--width", type=int, default=32, help="the CNN's first stage's channels")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    flops = flops_per_image(notebook_cnn(), args.size, args.width, 10)
    per_t4 = T4_FP16_FLOPS / flops
    notebook_workers = kk.loaders.workers_per_process(2, 4)
    with tempfile.TemporaryDirectory(prefix="kk-images-") as tmp:
        paths = write_photos(Path(tmp) / "train_images", args.images)
        mb = sum(p.stat().st_size for p in paths) / 1e6
        per_epoch = {w: images_per_s(DecodeEachRead(paths, args.size), args.batch, w) for w in (0, 1, 2, 4)}
        started = time.perf_counter()
        decoded = kk.images.decode_all(paths, args.size, workers=4)
        once = len(paths) / (time.perf_counter() - started)
        memory = images_per_s(torch.utils.data.TensorDataset(torch.from_numpy(decoded), torch.zeros(len(paths))),
                              args.batch, 0)
    print(f"the image notebook's CNN (width {args.width}) at {args.size}x{args.size}: {flops / 1e9:.2f} GFLOP per "
          f"image, forward + backward; a T4 at {T4_FP16_FLOPS / 1e12:.0f} TFLOPS fp16 consumes at most "
          f"{per_t4:,.0f} images/s")
    print(f"{len(paths)} JPEG photographs ({mb:.0f} MB, 500-800 x 380-600), batch {args.batch}:")
    for workers, rate in per_epoch.items():
        mark = "  <- the notebook's per rank on Kaggle" if workers == notebook_workers else ""
        print(f"  decoded per epoch, {workers} worker(s): {rate:8.1f} images/s   ratio {rate / per_t4:6.3f}{mark}")
    print(f"  decoded once, 4 processes      : {once:8.1f} images/s, once per version (the unit)")
    print(f"  decoded, read from memory      : {memory:8.1f} images/s   ratio {memory / per_t4:6.3f}   (goal >= 1)")
    best = max(per_epoch.values())
    chosen = "decoded once (a unit), batches from memory" if memory > best else "decoded per epoch in workers"
    print(f"chosen: {chosen}: {max(memory, best) / best:.1f}x the best per-epoch decode; "
          "on the GPU (nvJPEG): not measured here")


if __name__ == "__main__":
    main()
