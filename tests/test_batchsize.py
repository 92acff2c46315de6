"""The largest per-GPU batch a card holds, found by running the step: doubling, then a search
between the last batch that fit and the first that did not, less a headroom. On the CPU a
stand-in step raises CUDA's own out-of-memory error past a set number of samples."""
import pytest
import torch

from kagglekit.loop.batchsize import largest_batch


def _card(holds: int, calls: list):
    def step(batch: int):
        calls.append(batch)
        x = torch.randn(batch, 8, requires_grad=True)
        (x * 2).sum().backward()  # a real step's shape of work
        if batch > holds:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch} rows")
    return step


@pytest.mark.parametrize("holds", [1, 37, 64, 1000])
def test_the_largest_batch_that_fits_is_found_and_kept_under_its_headroom(holds):
    calls = []
    found = largest_batch(_card(holds, calls), start=1, limit=4096)
    assert found["largest_fit"] == holds and found["first_out_of_memory"] == holds + 1
    assert found["batch"] == max(1, int(holds * 0.85))
    assert len(calls) <= 2 * holds.bit_length() + 2  # doubling, then halving: logarithmic
    assert [t["fits"] for t in found["tries"]] == [b <= holds for b in calls]


def test_a_card_that_holds_the_limit_says_so_and_one_that_holds_nothing_is_refused():
    found = largest_batch(_card(10**6, []), start=8, limit=100)
    assert found["largest_fit"] == found["batch"] == 100 and found["first_out_of_memory"] is None  # 128 is past it
    found = largest_batch(_card(90, []), start=8, limit=100)  # the limit tried, then the edge below it
    assert found["largest_fit"] == 90 and found["first_out_of_memory"] == 91 and found["batch"] == int(90 * 0.85)
    assert largest_batch(_card(2, []), start=4)["largest_fit"] == 2  # below the start too
    with pytest.raises(RuntimeError, match="not even a per-GPU batch of 1 fits this card"):
        largest_batch(_card(0, []), start=4)
