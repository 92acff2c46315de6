"""3-D segmentation on the Vesuvius layout: lazy volumes, the ignore label, the threshold
baseline, the submission check, and the Kaggle parameters' batch on a T4."""
import io
import json
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from torch import nn
from torch.nn import functional as F

import kagglekit as kk
from kagglekit import segment3d, volumes

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "segmentation_3d.ipynb"


def notebook_defs(*names: str) -> dict:
    """The notebook's own definitions of ``names`` (its cells run in a namespace holding
    the notebook's imports): the tests check the code a Kaggle user reads and edits."""
    ns = {"torch": torch, "nn": nn, "F": F, "np": np, "kk": kk}
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and any(f"def {n}(" in source or f"class {n}(" in source
                                               for n in names):
            exec(compile(source, str(NOTEBOOK), "exec"), ns)
    missing = [n for n in names if n not in ns]
    assert not missing, f"the notebook defines no {missing}"
    return ns


def sheet_volume(shape, seed=0):
    """uint8 image with a bright wavy sheet, and its 0 / 1 / 2 labels (a slab unlabelled)."""
    rng = np.random.default_rng(seed)
    z = np.arange(shape[0])[:, None, None]
    y = np.arange(shape[1])[None, :, None]
    surface = shape[0] / 2 + 3 * np.sin(y / 5.0)
    label = (np.abs(z - surface) < 1.0).astype(np.uint8) * np.ones(shape, np.uint8)
    image = np.clip(rng.normal(100, 30, shape) + 60 * label, 0, 255).astype(np.uint8)
    label[:, :, : shape[2] // 6] = volumes.IGNORE
    return image, label


def test_a_tiff_is_read_by_crop_memory_mapped_or_page_by_page(tmp_path):
    image, _ = sheet_volume((20, 24, 28))
    plain = volumes.TiffVolume(volumes.write_volume(tmp_path / "a.tif", image))
    packed = volumes.TiffVolume(volumes.write_volume(tmp_path / "b.tif", image, compress=True))
    assert plain._mapped is not None and packed._mapped is None
    for v in (plain, packed):
        assert v.shape == (20, 24, 28) and v.dtype == np.uint8
        assert np.array_equal(v.crop((3, 4, 5), (6, 7, 8)), image[3:9, 4:11, 5:13])
        assert np.array_equal(v.read(), image)


def test_a_volume_larger_than_the_memory_it_is_allowed_is_trained_on_by_patches(tmp_path):
    shape = (96, 256, 256)  # 6.3 MB as uint8, 25 MB as float32
    image, label = sheet_volume(shape)
    vol = volumes.TiffVolume(volumes.write_volume(tmp_path / "big.tif", image))
    lab = volumes.TiffVolume(volumes.write_volume(tmp_path / "big_labels.tif", label))
    allowance = image.nbytes // 2  # less than the volume itself, let alone as float32
    del image, label
    model = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.GELU(), nn.Conv3d(4, 1, 1))
    loss = lambda m, b: F.binary_cross_entropy_with_logits(m(b[0]), (b[1] == 1).float())  # noqa: E731
    train = lambda data: kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1),  # noqa: E731
                                kk.make_loader(data, 4, num_workers=0), loss, epochs=1, progress=False)
    train(torch.utils.data.TensorDataset(torch.zeros(4, 1, 8, 8, 8), torch.zeros(4, 1, 8, 8, 8)))
    tracemalloc.start()  # after a first fit: the imports it makes are not the reading
    try:
        result = train(segment3d.Patches([vol], [lab], 16, 32, seed=0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.summary()["steps"] == 8
    assert peak < allowance, f"reading peaked at {peak / 1e6:.1f} MB"


def test_voxels_labelled_2_change_neither_the_loss_nor_the_dice():
    surface_loss = notebook_defs("surface_loss")["surface_loss"]
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (2, 1, 8, 8, 8), generator=g).float()
    logits = torch.randn(2, 1, 8, 8, 8, generator=g)
    other = logits.clone()
    other[labels == 2] = torch.randn(int((labels == 2).sum()), generator=g) * 10
    assert torch.equal(surface_loss(logits, labels), surface_loss(other, labels))
    assert segment3d.dice(logits > 0, labels) == segment3d.dice(other > 0, labels)
    changed = logits.clone()
    changed[labels == 0] += 5  # a labelled voxel does count
    assert surface_loss(changed, labels) > surface_loss(logits, labels)
    assert segment3d.dice(changed > 0, labels) < segment3d.dice(logits > 0, labels)


def test_the_threshold_baseline_is_the_best_threshold_by_dice():
    image, label = sheet_volume((24, 24, 24), seed=3)
    t, score = segment3d.best_threshold(segment3d.threshold_counts(image, label))
    brute = [segment3d.dice(torch.from_numpy(image >= c), torch.from_numpy(label)) for c in range(256)]
    assert score == pytest.approx(max(brute)) and brute[t] == pytest.approx(score)


def _zip(path, masks: dict) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, mask in masks.items():
            buf = io.BytesIO()
            tifffile.imwrite(buf, mask, photometric="minisblack")
            zf.writestr(name, buf.getvalue())
    return path


def test_the_submission_check_names_every_missing_wrong_or_extra_mask(tmp_path):
    expected = {"a": (4, 5, 6), "b": (6, 5, 4)}
    good = _zip(tmp_path / "good.zip", {"a.tif": np.zeros((4, 5, 6), np.uint8),
                                        "b.tif": np.ones((6, 5, 4), np.uint8)})
    assert segment3d.check_submission(good, expected) == 2
    bad = _zip(tmp_path / "bad.zip", {"a.tif": np.zeros((4, 5, 7), np.uint8),
                                      "c.tif": np.zeros((4, 5, 6), np.uint8)})
    with pytest.raises(segment3d.SubmissionError) as err:
        segment3d.check_submission(bad, expected)
    text = str(err.value)
    assert "no mask for test id b" in text and "c.tif is not a test id" in text
    assert "a.tif is uint8 (4, 5, 7), must be uint8 (4, 5, 6)" in text
    wrong = _zip(tmp_path / "w.zip", {"a.tif": np.zeros((4, 5, 6), np.float32),
                                      "b.tif": np.full((6, 5, 4), 255, np.uint8)})
    with pytest.raises(segment3d.SubmissionError, match="a.tif is float32.*b.tif holds values above 1"):
        segment3d.check_submission(wrong, expected)


def test_the_layout_reader_names_what_is_missing(tmp_path):
    image, label = sheet_volume((16, 16, 16))
    volumes.write_layout(tmp_path / "comp", {"t1": (image, label), "t2": (image, label)},
                         {"x1": image})
    layout = volumes.read_layout(tmp_path)  # found below the given folder, as under /kaggle/input
    assert (layout.train_ids, layout.test_ids) == (["t1", "t2"], ["x1"])
    (tmp_path / "comp" / "train_labels" / "t1.tif").unlink()
    layout = volumes.read_layout(tmp_path)  # an id without its files: skipped and named
    assert layout.train_ids == ["t2"] and layout.skipped == {"t1": "no image or label file"}
    (tmp_path / "comp" / "test_images" / "x1.tif").unlink()
    with pytest.raises(FileNotFoundError, match=r"test ids without a volume .*\['x1'\]"):
        volumes.read_layout(tmp_path)
    with pytest.raises(FileNotFoundError, match="holds no train.csv"):
        volumes.read_layout(tmp_path / "comp" / "test_images")


@pytest.fixture
def no_imagecodecs(monkeypatch):
    """Kaggle's image: ``import imagecodecs`` fails (tifffile then cannot decode LZW)."""
    import sys
    monkeypatch.setitem(sys.modules, "imagecodecs", None)


def test_the_real_layout_lzw_and_moved_ids_read_in_kaggles_image(tmp_path, no_imagecodecs):
    """The competition's files as they ship (tools/standins.py: LZW stacks, ids moved to
    deprecated_*, id,scroll_id, two shapes, one public test volume), read without imagecodecs."""
    from kagglekit.tools import standins
    folder = standins.vesuvius(tmp_path / "comp", shrink=4)
    with pytest.raises(ValueError, match="imagecodecs"):  # what tifffile alone does with them
        tifffile.imread(folder / "train_images" / f"{standins.TRAIN[0][0]}.tif")
    layout = volumes.read_layout(tmp_path)
    assert layout.train_ids == [vid for vid, _, _ in standins.TRAIN]
    assert layout.skipped == {vid: "in deprecated_train_images/ (old binary labels)"
                              for vid, _, _ in standins.MOVED}
    assert "2 of 6 ids in train.csv skipped: 2 moved to deprecated_train_images/" in layout.describe_skipped()
    assert layout.scroll[standins.TRAIN[2][0]] == "34117" and layout.test_ids == ["1407735"]
    vid = standins.TRAIN[1][0]  # the larger shape
    image = layout.image(vid)
    assert image.shape == (28, 28, 28) and image.compression == "LZW" and image.decoder == "pillow"
    expected, truth = volumes.synthetic_chunk(28, 1)
    assert np.array_equal(image.read(), expected) and np.array_equal(layout.label(vid).read(), truth)
    assert np.array_equal(image.crop((3, 4, 5), (6, 7, 8)), expected[3:9, 4:11, 5:13])
    with_old = volumes.read_layout(tmp_path, deprecated=True)
    moved = standins.MOVED[0][0]
    assert moved in with_old.train_ids and not with_old.skipped
    assert set(np.unique(with_old.label(moved).read())) <= {0, 1}  # binary, no unlabelled class
    assert with_old.files([moved])[0].parent.name == "deprecated_train_images"


def test_a_compressed_volume_is_decoded_once_then_cropped_from_the_cache(tmp_path, no_imagecodecs,
                                                                         monkeypatch):
    image, _ = sheet_volume((20, 24, 28))
    path = volumes.write_volume(tmp_path / "v.tif", image, compress="lzw")
    cache = volumes.VolumeCache(tmp_path / "cache")
    volume = volumes.TiffVolume(path, cache)
    assert np.array_equal(volume.crop((2, 3, 4), 5), image[2:7, 3:8, 4:9])
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".npy"]  # one decode, no lock left

    def never(*args):
        raise AssertionError("decoded again")
    from kagglekit.volumes import tiff
    monkeypatch.setattr(tiff, "decode_pages", never)
    again = volumes.TiffVolume(path, volumes.VolumeCache(tmp_path / "cache"))  # a new process's view
    assert np.array_equal(again.crop((10, 0, 0), (10, 24, 28)), image[10:])


def test_a_full_disk_reads_crops_directly_and_says_so_once(tmp_path, no_imagecodecs, monkeypatch):
    image, _ = sheet_volume((12, 16, 16))
    monkeypatch.setattr(kk.volumecache, "_free_bytes", lambda folder: 0)
    cache = volumes.VolumeCache(tmp_path / "cache")
    paths = [volumes.write_volume(tmp_path / f"{i}.tif", image, compress="lzw") for i in range(2)]
    with pytest.warns(UserWarning, match="no room for more decoded volumes") as warned:
        crops = [volumes.TiffVolume(p, cache).crop((1, 2, 3), 4) for p in paths]
    # pytest.warns records every warning while open (an earlier test's object collected then, another thread's):
    # on a fresh clone's make test four others came with this one
    said = [w for w in warned if "no room for more decoded volumes" in str(w.message)]
    assert len(said) == 1, [f"{w.category.__name__}: {w.message}" for w in warned]
    assert all(np.array_equal(c, image[1:5, 2:6, 3:7]) for c in crops)
    assert not list((tmp_path / "cache").glob("*.npy"))


def test_a_cache_budget_smaller_than_the_volumes_caches_what_fits_and_names_the_rest(
        tmp_path, no_imagecodecs):
    image, _ = sheet_volume((16, 20, 20))
    paths = [volumes.write_volume(tmp_path / f"{i}.tif", image, compress="lzw") for i in range(4)]
    cache = volumes.VolumeCache(tmp_path / "cache", budget_bytes=int(2.5 * image.nbytes))
    vols = [volumes.TiffVolume(p, cache) for p in paths]
    plan = cache.plan(vols, patch=8)
    assert (plan.volumes, plan.cached, plan.left_out) == (4, 2, ["2.tif", "3.tif"])
    text = str(plan)
    assert "2 of 4 compressed volumes fit" in text and "2.tif, 3.tif" in text
    assert "ms a crop instead of" in text and "50% of the crops" in text  # what it costs
    assert all(np.array_equal(v.crop((1, 2, 3), 4), image[1:5, 2:6, 3:7]) for v in vols)
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2  # within the budget
    again = volumes.VolumeCache(tmp_path / "cache", budget_bytes=0).plan(vols)  # next session
    assert again.cached == 2 and again.cached_bytes == 0  # what is cached stays in use


def test_the_kaggle_batch_is_seed_002s_16_per_t4_counted_under_the_emulation(monkeypatch):
    """The Kaggle parameters size the batch (0, 0): counted on fake tensors against the emulated T4's
    15 GiB, the U-Net at its Kaggle patch holds at least the seed's 16, so T4 x2 trains 16 per GPU
    without accumulation towards the effective 32."""
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    params = json.loads((REPO / "kernel-metadata" / "segmentation_3d.json").read_text())["parameters"]
    assert (params["batch_size"], params["accumulate"]) == (0, 0)
    defs = notebook_defs("UNet3D", "surface_loss")
    patch = params["patch"]
    found = kk.batchplan.per_gpu_batch(
        lambda: defs["UNet3D"](params["width"], params["depth"]),
        lambda b: (torch.rand(b, 1, patch, patch, patch), torch.randint(0, 3, (b, 1, patch, patch, patch)).float()),
        lambda model, batch: defs["surface_loss"](model(batch[0]), batch[1]), device="cpu", most=32)
    assert "emulated Tesla T4's 15 GiB (fp16)" in found["how"]
    assert 16 <= found["largest_fit"] < 32 and found["first_out_of_memory"] == found["largest_fit"] + 1
    assert 0.8 * 15 * 1024 < found["peak_mb"] <= 15 * 1024  # the largest that fit is near the card's edge
    assert kk.batchplan.split(32, found["batch"], world=2) == (16, 1)
    assert kk.batchplan.split(32, 12, world=2) == (8, 2)  # a card that held fewer: accumulation to 32


def test_the_notebook_sizes_its_batch_under_the_emulation_and_keeps_the_choice(tmp_path):
    """batch_size 0 and accumulate 0 under KAGGLEKIT_EMULATE=t4x2: the choice printed, logged, used by
    both ranks, and kept as a unit: the next version reads it, measures nothing."""
    import os

    from kagglekit.tools.notebook_runner import run_notebook
    params = {"smoke": True, "batch_size": 0, "accumulate": 0, "effective_batch": 8, "epochs": 1}
    os.environ["KAGGLEKIT_EMULATE"] = "t4x2"
    try:
        out = run_notebook(NOTEBOOK, params, output_dir=tmp_path / "seg", progress=False)
        m = json.loads((out / "metrics.json").read_text())
        printed = json.dumps(json.loads((out / "segmentation_3d.ipynb").read_text())["cells"])
        again = run_notebook(NOTEBOOK, params, output_dir=out, progress=False)
    finally:
        del os.environ["KAGGLEKIT_EMULATE"]
    found = m["batch_size_found"]
    assert "counted on fake tensors against the emulated Tesla T4" in found["how"] and found["largest_fit"] == 8
    assert (m["per_gpu_batch"], m["accumulate"], m["effective_batch"]) == (4, 1, 8)  # 8 over the 2 emulated T4s
    assert "per-GPU batch 8: counted on fake tensors" in printed
    assert "4 per GPU x 1 accumulated x 2" in (out / "logs" / "rank0.log").read_text()  # what rank 0 trained with
    assert json.loads((again / "metrics.json").read_text())["chain"]["cache:batch-size"] == "hit"


def test_a_step_is_counted_with_its_weights_gradients_moments_and_activations(monkeypatch):
    """One Linear layer's step on fake tensors: 16 bytes a parameter (weight, gradient, AdamW's two
    moments) plus what grows with the batch; a batch past the emulated card's memory is its
    out-of-memory, so the search stops where the count says."""
    from dataclasses import replace

    from kagglekit.loop import batchplan
    from kagglekit.machine import emulate
    d = 512
    counted = [batchplan.counted_step_bytes(lambda: nn.Linear(d, d, bias=False), lambda b: (torch.rand(b, d),),
                                            lambda model, batch: model(batch[0]).square().mean(), b, False)
               for b in (64, 128)]
    # weights, gradients, AdamW's two moments; the step's temporaries (foreach's of parameter size) and the
    # activations on top, never a second count of them
    assert 16 * d * d < counted[0] < 16 * d * d + 3 * 4 * d * d + 4 * 64 * d * 4
    assert counted[1] - counted[0] >= 64 * d * 4  # the input rows at least
    small = replace(emulate.MACHINES["t4x2"], card=replace(emulate.T4, memory_gib=counted[0] / 2**30))
    monkeypatch.setitem(emulate.MACHINES, "t4x2", small)
    monkeypatch.setenv("KAGGLEKIT_EMULATE", "t4x2")
    found = batchplan.per_gpu_batch(lambda: nn.Linear(d, d, bias=False), lambda b: (torch.rand(b, d),),
                                    lambda model, batch: model(batch[0]).square().mean(), device="cpu", most=1024,
                                    precision="fp32")
    assert found["largest_fit"] == 64 and found["first_out_of_memory"] == 65
