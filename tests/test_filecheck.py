"""Unreadable files in good stand-in folders, as real competition downloads have them: an image cut
short, a web page saved under an image's or a recording's name, an empty file. A training file is
dropped before any decoding and counted in the run's note; a test file the submission needs is
refused by name. Each case crashed minutes in with the decoder's own error before (issue 84)."""
import shutil
from pathlib import Path

import pandas as pd
import pytest

import kagglekit as kk
from kagglekit.audio import audiosynth, folder as audio
from kagglekit.images import folder as images, imagesets
from kagglekit.readers import filecheck

HTML = b"<!DOCTYPE html><html><head><title>Kaggle</title></head><body>Sign in</body></html>\n"


def cut_short(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


MUTATIONS = {"cut short": cut_short, "a web page": lambda p: p.write_bytes(HTML), "empty": lambda p: p.write_bytes(b"")}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return imagesets.write_competition(tmp_path_factory.mktemp("digits") / "digits")


@pytest.fixture(scope="module")
def birdsong(tmp_path_factory):
    return audiosynth.write_competition(tmp_path_factory.mktemp("birdsong") / "comp", seed=1, recordings=24,
                                        soundscapes=2)


@pytest.mark.parametrize("mutation", MUTATIONS)
@pytest.mark.parametrize("ext", [".png", ".jpg"])
def test_an_unreadable_training_image_is_dropped_and_counted_before_any_decoding(tmp_path, digits, mutation, ext):
    folder = shutil.copytree(digits, tmp_path / "copy")
    good = images.read_competition(folder)
    victim = next(p for p in good.paths if p.suffix == ext)
    MUTATIONS[mutation](victim)
    comp = images.read_competition(folder)
    assert victim not in comp.paths and len(comp.paths) == len(good.paths) - 1 == len(comp.labels)
    assert comp.unreadable == [f"{victim.name} ({filecheck.image_problem(victim)})"]
    kept = {p: label for p, label in zip(good.paths, good.labels)}
    assert all(kept[p] == label for p, label in zip(comp.paths, comp.labels))  # every label stays with its image
    assert kk.filecheck.note(comp.unreadable, "training images")[0].startswith("1 training images cannot be read")
    with pytest.raises(OSError):  # what the decoder said before, minutes in on a real set (PIL's errors are OSErrors)
        images.decode(victim, 16)


def test_an_unreadable_test_image_is_refused_by_name(tmp_path, digits):
    folder = shutil.copytree(digits, tmp_path / "copy")
    victim = sorted((folder / "test_images").glob("*.png"))[3]
    cut_short(victim)
    with pytest.raises(images.ImageDataError, match=rf"1 of \d+ test images .* cannot be read, and the submission "
                                                    rf"needs every one: {victim.name} \(cut short \(a PNG"):
        images.read_competition(folder)


@pytest.mark.slow
def test_the_image_notebook_trains_without_the_unreadable_image_and_says_so(tmp_path, digits):
    from kagglekit.tools.notebook_runner import run_notebook
    folder = shutil.copytree(digits, tmp_path / "copy")
    victim = sorted((folder / "train_images").glob("*.png"))[0]
    victim.write_bytes(HTML)
    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "image_classification.ipynb"
    out = run_notebook(notebook, {"smoke": True, "data_dir": str(folder), "svc_max_images": 100},
                       output_dir=tmp_path / "run", progress=False)
    executed = (out / "image_classification.ipynb").read_text()
    assert f"1 training images cannot be read and were dropped: {victim.name} (not an image PIL can read" in executed
    assert len(pd.read_csv(out / "submission.csv")) == len(pd.read_csv(folder / "sample_submission.csv"))


@pytest.mark.parametrize("mutation", ["a web page", "empty"])
def test_an_unreadable_recording_is_dropped_and_an_unreadable_soundscape_refused(tmp_path, birdsong, mutation):
    folder = shutil.copytree(birdsong, tmp_path / "copy")
    good = audio.read_competition(folder)
    victim = good.clips[2]
    MUTATIONS[mutation](victim)
    comp = audio.read_competition(folder)
    assert victim not in comp.clips and len(comp.clips) == len(good.clips) - 1 == len(comp.primary)
    assert comp.unreadable == [f"{victim.parent.name}/{victim.name} ({filecheck.audio_problem(victim)})"]
    assert len(comp.secondary) == len(comp.clips)
    MUTATIONS[mutation](comp.soundscapes[1])
    with pytest.raises(audio.AudioDataError, match=rf"1 of 2 test soundscapes cannot be read, .*"
                                                   rf"{comp.soundscapes[1].name} \("):
        audio.read_competition(folder)


def test_an_image_with_bytes_after_its_end_is_kept(tmp_path, digits):
    """Some cameras append a trailer after a JPEG's end marker: the file decodes, it must not be dropped."""
    victim = sorted((digits / "train_images").glob("*.jpg"))[0]
    padded = tmp_path / victim.name
    padded.write_bytes(victim.read_bytes() + b"SEFT" + bytes(4096))
    assert filecheck.image_problem(padded) is None
    padded.write_bytes(victim.read_bytes()[:-40])  # its scan cut short, its headers whole
    assert filecheck.image_problem(padded) == "cut short (a JPEG without its end-of-image marker)"
