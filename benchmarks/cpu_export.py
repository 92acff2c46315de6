"""A model for a CPU-only rerun: ONNX Runtime against torch on the CPU, in the same run.

The model: a small ResNet-style image classifier (four stages of two 3x3 convolutions with
BatchNorm and a residual, 32-256 channels) on 128x128 RGB images, batches of 32: the shape of an
image competition's CPU rerun (BirdCLEF's is 90 minutes on 4 cores). ``kk.export.export`` checks
the ONNX outputs against torch's, times both at ``--threads`` and keeps the faster. Printed:
samples/s of each and the ratio (> 1: ONNX Runtime faster), the largest difference.
"""
from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn

import kagglekit as kk


class Block(nn.Module):
    def __init__(self, inp: int, out: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(inp, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU(),
                                  nn.Conv2d(out, out, 3, 1, 1, bias=False), nn.BatchNorm2d(out))
        self.skip = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out)) \
            if stride != 1 or inp != out else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet_like(classes: int = 10) -> nn.Module:
    widths = [32, 64, 128, 256]
    layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    for i, w in enumerate(widths):
        layers.append(Block(widths[max(i - 1, 0)], w, 1 if i == 0 else 2))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes)).eval()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=min(4, torch.get_num_threads()))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(0)
    model, batch = resnet_like(), torch.randn(args.batch, 3, args.size, args.size)
    done = kk.export.export(model, batch, tempfile.mkdtemp(prefix="export-bench-"), threads=args.threads, repeats=7)
    rates = done.rates
    print(f"{args.batch} images of {args.size}x{args.size}, {args.threads} threads: " +
          ", ".join(f"{k} {v:,.1f} images/s" for k, v in rates.items()))
    print(f"onnxruntime / torch: x{rates['onnxruntime'] / rates['torch']:.2f}; chosen {done.chosen}; "
          f"largest difference {done.largest_diff:.2e}")


if __name__ == "__main__":
    main()
