"""Large data reaches the launched ranks as its file, not as a copy each (``parallel.mapped``).

The audio and image notebooks' launched ``train`` refers to the decoded data. Sent by value, each
of two ranks unpacked its own copy: about six times the data's bytes on the machine while they
ran (benchmarks/launch_payload.py), so a T4 x2 machine of 29 GB launched with at most ~3.5 GB of
images. A unit's value cached with ``mapped=True`` is mapped from its file, and a launch sends the
file. What must hold: the payload stays small whatever the data's size; every rank reads exactly
what the notebook holds, views included; and nothing stale is ever read (data written in place,
or a file replaced since, goes by value).
"""
import os

import numpy as np
import pytest
import torch

import kagglekit as kk
from kagglekit import forkserver, inputs, mapped
from kagglekit.state.cache import Cache

MIB = 2 ** 20


def _decoded(rows: int = 4096) -> dict:
    """4 MiB of uint8 "images" and their labels, as the image notebook's decode() returns them."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (rows, 32, 32), dtype=torch.uint8, generator=generator)
    return {"train": images, "test": images[:0].clone(), "ids": [f"im{i}" for i in range(3)]}


def _kept(root, fn=_decoded, **kwargs) -> dict:
    return Cache(root, **kwargs).compute("decoded", "k", fn, config={}, mapped=True)


def _sums(part) -> list:
    """What a rank read: each sample's sum, in order."""
    return [int(x.sum()) for x, *_ in part]


def test_a_mapped_value_travels_as_its_file_and_every_rank_reads_the_same(tmp_path):
    kept = _kept(tmp_path)
    labelled = torch.utils.data.TensorDataset(kept["train"], torch.arange(len(kept["train"])))
    part = torch.utils.data.Subset(labelled, list(range(5, 4000, 7)))  # a fold's share, by index
    view = kept["train"][100:300, 3:, ::2]  # a view with an offset and strides
    assert len(forkserver.pack(lambda: (part, view))) < 64 * 1024  # 4 MiB of images; the 32 KB of labels by value
    by_value = torch.utils.data.TensorDataset(kept["train"].clone(), torch.arange(len(kept["train"])))
    assert len(forkserver.pack(lambda: by_value)) > 4 * MIB  # what it was before

    def read(part, view):
        return _sums(part), view.tolist(), mapped.origin_of(view) is not None
    in_ranks = kk.launch(read, part, view, nprocs=2)
    assert in_ranks == (_sums(part), view.tolist(), True)  # mapped in the rank too


def test_a_hit_is_mapped_too_and_the_values_are_the_stored_ones(tmp_path):
    first = _kept(tmp_path)
    again = _kept(tmp_path, fn=lambda: pytest.fail("a hit computes nothing"))
    assert torch.equal(first["train"], again["train"]) and again["ids"] == first["ids"]
    assert mapped.origin_of(again["train"]) is not None
    assert mapped.origin_of(again["test"]) is None  # empty: nothing to map, sent by value (free)


def test_data_written_in_place_after_mapping_is_sent_by_value(tmp_path):
    """The mapping is private: the file still holds the old values, so a rank that mapped it
    would read other data than the notebook trains on."""
    kept = _kept(tmp_path)
    images = kept["train"]
    images[:10] = 0  # the notebook normalises or fixes some rows in place
    assert mapped.origin_of(images) is None and mapped.origin_of(images[5:]) is None
    assert kk.launch(lambda x: int(x[:10].sum()), images, nprocs=2) == 0


def test_a_file_replaced_since_is_never_read_by_a_rank(tmp_path):
    old = _kept(tmp_path)
    expected = old["train"].clone()
    _kept(tmp_path, fn=lambda: {"train": torch.zeros(8, 8, dtype=torch.uint8)}, force=True)  # recomputed
    assert mapped.origin_of(old["train"]) is None
    assert kk.launch(lambda x: x.tolist(), old["train"][:3], nprocs=2) == expected[:3].tolist()


def test_a_receiver_refuses_a_file_replaced_after_the_send(tmp_path):
    kept = _kept(tmp_path)
    reduced, args = mapped.reference(kept["train"])
    entry = next(tmp_path.rglob("value.pt"))
    entry.write_bytes(entry.read_bytes())  # the same path, another file (a new mtime)
    os.utime(entry, ns=(args[1][2] + 10**9, args[1][2] + 10**9))
    with pytest.raises(RuntimeError, match="was replaced after the notebook mapped it"):
        reduced(*args)


def test_a_hit_in_the_inputs_is_mapped_from_this_outputs_copy(tmp_path, kaggle_tree):
    """On Kaggle the previous version's output is mounted read-only and may not be attached to
    the version after next: the ranks must map the copy this version keeps."""
    previous = kaggle_tree / "input" / "notebooks" / "me" / "images" / "cache"
    stored = _kept(previous)["train"].clone()
    inputs.forget()
    working = kaggle_tree / "working" / "cache"
    kept = _kept(working, fn=lambda: pytest.fail("found in the inputs"))
    assert torch.equal(kept["train"], stored)
    assert mapped.origin_of(kept["train"]).path.startswith(str(working))


def test_a_unit_caches_mapped_through_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEKIT_OUTPUT", str(tmp_path / "out"))
    declared = {"seed": 0, "force_retrain": False}
    run = kk.start(dict(declared), "mapped-unit", declared=declared, verbose=False)
    value = run.unit("decoded", code=_decoded).cached(_decoded, mapped=True)
    assert mapped.origin_of(value["train"]) is not None
    assert run.unit("plain", code=_decoded).cached(mapped=False)["train"].untyped_storage().data_ptr() not in (
        mapped._ORIGINS)


def test_channel_stats_in_chunks_equal_the_whole_sets():
    images = np.random.default_rng(1).integers(0, 256, (1001, 9, 7, 3), dtype=np.uint8)
    mean, std = kk.images.channel_stats(torch.from_numpy(images), chunk=64)
    whole = torch.from_numpy(images).double() / 255
    np.testing.assert_allclose(mean, whole.mean((0, 1, 2)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(std, whole.std((0, 1, 2)).numpy(), rtol=1e-9)
    with pytest.raises(kk.images.ImageDataError, match="no training images"):
        kk.images.channel_stats(images[:0])
