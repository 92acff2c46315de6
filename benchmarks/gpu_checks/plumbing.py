"""What the kit claims of the host-to-GPU path, asserted on a card: the loader pins its batches
(``make_loader(..., device=cuda)``), the fit copies them with ``non_blocking=True`` (the copy
overlaps the previous step), and cuDNN's autotuning is on while the fit runs and set back after."""
from __future__ import annotations

from common import card, main


def check():
    import torch

    import kagglekit as kk
    from kagglekit.parallel import loaders
    device = card()
    data = kk.datasets.tabular(1024, features=32, classes=4, seed=0)
    loader = kk.make_loader(data, 64, device=device, num_workers=1)
    batch = next(iter(loader))
    pinned = loader.pin_memory and all(t.is_pinned() for t in batch)
    copies, seen_benchmark = [], []
    original = torch.Tensor.to

    def recording_to(tensor, *args, **kwargs):  # what the fit asks of each copy to the card
        if tensor.device.type == "cpu" and any(str(a).startswith("cuda") for a in [*args, kwargs.get("device")]):
            copies.append(bool(kwargs.get("non_blocking")))
        return original(tensor, *args, **kwargs)

    def watch(state):
        seen_benchmark.append(torch.backends.cudnn.benchmark)
    before = torch.backends.cudnn.benchmark
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    torch.Tensor.to = recording_to
    try:
        kk.fit(model, torch.optim.AdamW(model.parameters()), loader, kk.supervised(torch.nn.functional.cross_entropy),
               run=kk.Alone(device=device), epochs=1, progress=False, on_step_end=watch,
               monitor=kk.Monitor(gpu=False))
    finally:
        torch.Tensor.to = original
    non_blocking = bool(copies) and all(copies)
    autotuned = bool(seen_benchmark) and all(seen_benchmark) and torch.backends.cudnn.benchmark == before
    facts = {"pinned_batches": pinned, "copies_to_card": len(copies), "all_non_blocking": non_blocking,
             "cudnn_benchmark_during_fit": all(seen_benchmark), "cudnn_benchmark_after": torch.backends.cudnn.benchmark,
             "to_device": loaders.to_device.__name__}
    return pinned and non_blocking and autotuned, facts


if __name__ == "__main__":
    main(check)
