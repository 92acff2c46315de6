"""A real out-of-memory error under the T4's 15 GiB cap (KAGGLEKIT_AS=t4): a batch that does
not fit is backed off by splitting, and ends with the weights of the same batch in halves that fit."""
from __future__ import annotations

import copy
import os

from common import card, main

os.environ["KAGGLEKIT_AS"] = "t4"


def _model(width: int):
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(width, width), torch.nn.GELU())],
                               torch.nn.Linear(width, 8))


def _fit(model, x, y, batch: int, accumulate: int):
    import torch

    import kagglekit as kk
    data = [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(x), batch)]
    return kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.01), data,
                  kk.supervised(torch.nn.functional.cross_entropy), run=kk.Alone(device=card()), epochs=1,
                  accumulate=accumulate, progress=False, speed=kk.Speed(precision="fp32"),
                  monitor=kk.Monitor(gpu=False))


def _peak_for(model, rows: int, width: int, device) -> int:
    import torch
    model.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    model(torch.randn(rows, width, device=device)).sum().backward()
    return torch.cuda.max_memory_allocated(device)


def _rows_that_overflow(width: int, factor: float = 1.3) -> int:
    """A batch about ``factor`` times what the cap holds: the marginal memory of a row measured
    between 512 and 1024 rows (the weights and their gradients cancel out)."""
    import torch

    import kagglekit as kk
    device = card()
    kk.ascard.confine(device)
    model = _model(width).to(device)
    per_row = (_peak_for(model, 1024, width, device) - _peak_for(model, 512, width, device)) / 512
    del model
    torch.cuda.empty_cache()
    return int(factor * kk.ascard.card().memory_gib * 2**30 / per_row) // 16 * 16


def check():
    import torch
    width = 4096
    rows = _rows_that_overflow(width)
    x = torch.randn(rows, width, device=card())
    y = torch.randint(0, 8, (rows,), device=card())
    split = _model(width)
    halves = copy.deepcopy(split)
    result = _fit(split, x, y, rows, 1)  # one batch that does not fit
    reference = _fit(halves, x, y, rows // 2, 2)  # the same step, in two halves that fit
    close = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5)
                for a, b in zip(split.state_dict().values(), halves.state_dict().values()))
    return bool(result.oom_events) and close, {
        "rows": rows, "oom_events": result.oom_events, "same_weights_as_halves": close,
        "reference_oom_events": reference.oom_events}


if __name__ == "__main__":
    main(check)
