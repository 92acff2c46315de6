"""Animal-sound competitions in BirdCLEF's layout (kagglekit/audio/folder.py and its stand-in,
audiosynth.py), BirdCLEF's metric, SpecAugment's masks, the EMA's weights restored from a
checkpoint, the fold models' export, and the audio notebook on its defaults against a plain
logistic regression on the same folds."""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import kagglekit as kk
from kagglekit.audio import audiosynth, folder as audio
from kagglekit.readers import decoding

sys.path.insert(0, str(Path(__file__).parent))
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def birdsong(tmp_path_factory):
    return audiosynth.write_competition(tmp_path_factory.mktemp("birdsong") / "comp", seed=1, recordings=24,
                                        soundscapes=2)


def test_the_folder_is_read_with_birdclefs_quirks(birdsong):
    comp = audio.read_competition(birdsong)
    assert comp.classes == sorted(comp.classes) and comp.classes[0] == "1139490"  # numeric ids stay text, first
    assert comp.dropped == ["grekis/XC000001.ogg"] and comp.unknown_secondary > 0
    heard = np.bincount(comp.primary, minlength=len(comp.classes))
    assert heard[comp.classes.index("trokin")] == 0 and heard[comp.classes.index("65419")] == 1
    table = pd.read_csv(birdsong / "train.csv", dtype=str, keep_default_na=False)
    assert {"[]", "['']"} <= set(table.secondary_labels) and {"rating", "author", "url"} <= set(table.columns)
    targets = comp.targets(0.5)
    assert (targets.max(1) == 1).all() and set(np.unique(targets)) <= {0.0, 0.5, 1.0}
    assert any(0.5 in row for row in targets)  # background species listed somewhere
    assert len(comp.soundscapes) == 2


def test_train_soundscapes_are_the_unlabelled_pool_and_a_broken_one_is_dropped_by_name(tmp_path, birdsong):
    """BirdCLEF 2025's train_soundscapes/: no table lists them; a file that does not decode is left out, said,
    and a stray file is no soundscape. Their windows decode as the test's do, through a transform a
    soundscape at a time."""
    folder = tmp_path / "comp"
    shutil.copytree(birdsong, folder)
    pool = sorted((folder / "train_soundscapes").iterdir())
    assert len(pool) == 4 and pool[0].name.startswith("H0") and pool[0].name.endswith("4000.ogg")
    (folder / "train_soundscapes" / "H09_20230501_000000.ogg").write_text("<html>not audio</html>")
    (folder / "train_soundscapes" / ".DS_Store").write_bytes(bytes(32))
    comp = audio.read_competition(folder)
    assert comp.pool == pool and comp.soundscapes == sorted((folder / "test_soundscapes").iterdir())
    assert [u.split(" (")[0] for u in comp.unreadable] == ["train_soundscapes/H09_20230501_000000.ogg"]
    waves = audio.decode_soundscapes(comp.pool[:2], workers=2)
    assert waves["windows"].shape == (24, 5 * 32000) and waves["windows"].dtype == torch.int16
    assert waves["row_ids"][:2] == [f"{pool[0].stem}_5", f"{pool[0].stem}_10"] and waves["seconds_each"] > 0
    means = audio.decode_soundscapes(comp.pool[:2], transform=lambda w: w.astype(np.float32).mean(1, keepdims=True))
    assert torch.allclose(means["windows"], waves["windows"].float().mean(1, keepdim=True), atol=1e-3)
    assert audio.decode_soundscapes([], transform=lambda w: w[:, :3])["windows"].shape == (0, 3)


def test_the_stand_in_is_the_same_bytes_when_written_again(tmp_path, birdsong):
    """libsndfile draws an Ogg stream's serial number from the clock: rewritten with a fixed one and
    valid checksums, the next kernel version's stand-in hashes alike (its units hit)."""
    wave = np.sin(np.arange(32000 * 3) / 5.0).astype(np.float32) * 0.3
    audiosynth.write_ogg(tmp_path / "a.ogg", wave)
    first = (tmp_path / "a.ogg").read_bytes()
    audiosynth.write_ogg(tmp_path / "a.ogg", wave)
    assert (tmp_path / "a.ogg").read_bytes() == first
    assert len(audio.decode(tmp_path / "a.ogg")) == len(wave)  # every page's checksum holds: nothing skipped


def test_secondary_label_cells_parse_without_eval():
    assert audio.parse_labels("['a', 'b']") == ["a", "b"]
    assert audio.parse_labels("[]") == audio.parse_labels("['']") == audio.parse_labels("") == []
    with pytest.raises(audio.AudioDataError, match="not a list of labels"):
        audio.parse_labels("__import__('os').system('true')")


def test_windows_resample_mix_down_pad_and_name_their_rows(tmp_path):
    import soundfile
    t = np.arange(int(44100 * 2.0)) / 44100
    stereo = np.stack([np.sin(2 * np.pi * 3000 * t), np.sin(2 * np.pi * 3000 * t)], 1) * 0.5
    soundfile.write(tmp_path / "short.wav", stereo, 44100)
    wave = audio.decode(tmp_path / "short.wav")
    assert wave.ndim == 1 and len(wave) == 64000  # 2 s at 32 kHz, one channel
    peak = np.argmax(np.abs(np.fft.rfft(wave))) * 32000 / len(wave)
    assert abs(peak - 3000) < 5  # the tone kept through the resampling
    windows = audio.clip_windows(tmp_path / "short.wav", count=3)
    assert windows.shape == (1, 160000) and windows.dtype == np.int16  # shorter than a window: repeated to fill it
    assert np.array_equal(windows[0, :64000], windows[0, 64000:128000])
    soundfile.write(tmp_path / "soundscape_77.ogg", np.zeros(32000 * 57, np.float32), 32000, format="OGG")
    scape, ids = audio.soundscape_windows(tmp_path / "soundscape_77.ogg")
    assert scape.shape == (12, 160000) and ids[0] == "soundscape_77_5" and ids[-1] == "soundscape_77_60"


def test_window_counts_from_the_headers_match_the_decoded_windows(tmp_path, birdsong):
    """What the audio notebook checks against the memory before decoding: every recording's window
    count read from its header equals what clip_windows cuts (short ones, long ones, another rate)."""
    import soundfile
    t = np.arange(int(44100 * 11.3)) / 44100
    soundfile.write(tmp_path / "long44k.wav", np.sin(2 * np.pi * 2000 * t) * 0.5, 44100)
    clips = [*audio.read_competition(birdsong).clips, tmp_path / "long44k.wav"]
    for count in (1, 3):
        assert [audio.window_count(p, count) for p in clips] == [len(audio.clip_windows(p, count)) for p in clips]
    assert audio.window_count(tmp_path / "long44k.wav", 6) == 2  # 11.3 s: two whole windows of 5 s


def test_windows_that_outgrow_the_memory_are_refused_naming_the_count_that_fits():
    counts = [6] * 1000 + [2] * 500  # recordings of 30 s and more, and of 10 s
    size = 160_000 * 2  # 5 s at 32 kHz as int16
    needed = 7000 * size  # one array
    assert audio.check_windows_fit(counts, size, {"memory": needed, "output": 10 * needed}) == needed
    with pytest.raises(audio.AudioDataError, match=r"7,000 training windows of 312 KB take 2\.1 GB, more than "
                                                   r"the 1\.2 GB of memory: lower windows_per_clip to 3 or less"):
        audio.check_windows_fit(counts, size, {"memory": 1_300_000_000, "output": 10 * needed}, count=6)
    with pytest.raises(audio.AudioDataError, match="even windows_per_clip=1 needs 0.4 GB"):
        audio.check_windows_fit(counts, size, {"memory": 100_000_000}, count=6)
    # The tightest of the places that hold them is named: here the output the unit's cache is kept in.
    with pytest.raises(audio.AudioDataError, match=r"1\.2 GB of Kaggle's saved output: lower windows_per_clip to 3"):
        audio.check_windows_fit(counts, size, {"memory": 10 * needed, "Kaggle's saved output": 1_300_000_000}, count=6)


def test_on_kaggle_the_room_to_keep_a_cache_is_what_is_left_of_the_20_gb(kaggle_tree, monkeypatch):
    """The audio notebook checks its windows against this before decoding them into a cached unit:
    under /kaggle/working the ~20 GB a version keeps, less what is there; elsewhere the free disk."""
    from kagglekit.state import space
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    working = kaggle_tree / "working"
    (working / "checkpoints").mkdir()
    (working / "checkpoints" / "step.pt").write_bytes(b"x" * 1000)
    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: type("U", (), {"free": 10**12})())
    assert space.room_to_keep(working / "cache") == space.KAGGLE_OUTPUT_LIMIT - 1000
    assert space.room_to_keep(kaggle_tree / "temp") == 10**12  # not kept: only the disk bounds it
    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: type("U", (), {"free": 5 * 10**9})())
    assert space.room_to_keep(working / "cache") == 5 * 10**9  # a fuller disk than the limit


def test_the_windows_fill_one_array_as_the_workers_decode_them(birdsong):
    """decode_windows (which never holds the parts beside the array it fills) gives what joining every
    recording's clip_windows gives, byte for byte, in worker processes or not; with a transform (the
    notebook's spectrogram), what the transform makes of them, batch by batch, never the waves."""
    clips = audio.read_competition(birdsong).clips
    parts = [audio.clip_windows(p, 3) for p in clips]
    joined = np.concatenate(parts)
    seen = []

    def halve(waves):  # features of another shape and type, and a record of what each call got
        seen.append(len(waves))
        return (waves[:, ::2].astype(np.float32) / 7).astype(np.float16)
    for workers in (1, 2):
        waves, clip = audio.decode_windows(clips, 3, workers=workers)
        assert waves.dtype == np.int16 and np.array_equal(waves, joined)
        assert np.array_equal(clip, np.repeat(np.arange(len(clips)), [len(p) for p in parts]))
        seen.clear()
        features, clip = audio.decode_windows(clips, 3, workers=workers, transform=halve, batch=5)
        assert features.dtype == np.float16 and np.array_equal(features, halve(joined))
        assert np.array_equal(clip, np.repeat(np.arange(len(clips)), [len(p) for p in parts]))
        assert max(seen[1:-1]) < 5 + 3 and sum(seen[1:-1]) == len(joined)  # the probe, the batches, the check


def _logged(path, log: Path):
    """A stand-in decoder that notes, in a file every worker appends to, each recording it starts."""
    with open(log, "a") as out:
        out.write(f"{path}\n")
    return path


def test_decoders_run_only_a_few_chunks_ahead_of_a_slow_consumer(tmp_path):
    """The spectrograms on the CPU consume slower than the workers decode: the workers may run at most
    AHEAD chunks each ahead of what was taken, not through the whole set (pool.map queued every
    recording's windows in memory: 1,180 MB of waves measured behind a 296 MB array)."""
    import functools
    import time
    log = tmp_path / "started.log"
    paths = [f"rec{i:03d}" for i in range(240)]
    ahead = []
    for taken, path in enumerate(decoding.each_decoded(paths, functools.partial(_logged, log=log), workers=2), 1):
        assert path == paths[taken - 1]  # in order
        time.sleep(0.004)  # the slow consumer
        ahead.append(len(log.read_text().splitlines()) - taken)
    bound = decoding.CHUNK * (decoding.AHEAD * 2 + 1)  # the chunks submitted and the one being taken
    assert max(ahead) <= bound < len(paths) // 2, (max(ahead), bound)


def test_public_data_without_test_soundscapes_reads_as_none(tmp_path):
    folder = audiosynth.write_competition(tmp_path / "public", recordings=8, soundscapes=1, public=True)
    comp = audio.read_competition(folder)
    assert comp.soundscapes == [] and not (folder / "solution.csv").exists()
    empty = comp.submission([], np.zeros((0, len(comp.classes))))
    assert empty.columns.tolist() == pd.read_csv(folder / "sample_submission.csv").columns.tolist()
    (folder / "train.csv").write_text((folder / "train.csv").read_text().replace("bkcdon,", "nosuch,", 1))
    with pytest.raises(audio.AudioDataError, match=r"\['nosuch'\] are not columns of sample_submission.csv"):
        audio.read_competition(folder)


def test_the_macro_auc_skips_classes_without_a_positive_as_birdclef_scores():
    from sklearn.metrics import roc_auc_score
    rng = np.random.default_rng(0)
    truth = (rng.random((200, 6)) < 0.2).astype(float)
    truth[:, 4] = 0  # a species that never calls in the test: skipped, not scored 0.5
    truth[5, 2] = 0.5  # a secondary label counts as heard
    scores = rng.random((200, 6)) + truth
    reference = np.mean([roc_auc_score(truth[:, k] > 0, scores[:, k]) for k in (0, 1, 2, 3, 5)])
    assert kk.metrics.macro_roc_auc(scores, truth) == pytest.approx(reference, abs=1e-12)
    with pytest.raises(ValueError, match=r"\(rows, classes\)"):
        kk.metrics.macro_roc_auc(scores[:, 0], truth[:, 0])


def test_band_statistics_are_each_bands_mean_and_spread_over_time_in_any_batch():
    specs = torch.randn(600, 1, 12, 40).half()  # stored float16, as the notebook keeps them
    stats = kk.mel.band_statistics(specs, lambda s: 2 * s.float(), batch=256)
    wanted = np.concatenate([2 * specs.float().numpy().mean(-1), (2 * specs.float()).std(-1).numpy()], -1)
    assert stats.shape == (600, 24) and np.allclose(stats, wanted.reshape(600, 24), atol=1e-5)
    assert kk.mel.band_statistics(specs[:0]).shape == (0, 24)  # no test soundscape: no row, the same columns


def test_spec_masks_are_drawn_from_the_saved_generator_and_stay_within_their_width():
    spec = torch.randn(8, 1, 40, 100)
    torch.manual_seed(3)
    a = kk.mel.mask(spec, 2, 0.1, 2, 0.1)
    torch.manual_seed(3)
    assert torch.equal(a, kk.mel.mask(spec, 2, 0.1, 2, 0.1))  # a resumed fit draws the same masks
    changed = (a != spec)[:, 0]
    assert changed.any() and not torch.equal(changed[0], changed[1])  # per sample
    masked_rows = changed.all(2).sum(1)  # mel bands masked across all frames
    assert (masked_rows <= 2 * 4).all()  # two masks of at most 10% of 40 bands


def test_the_emas_weights_come_back_from_the_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    ema, manager = kk.Ema(0.9), kk.CheckpointManager(tmp_path / "ck")
    kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.utils.data.DataLoader(data, 16),
           kk.supervised(torch.nn.functional.mse_loss), epochs=2, checkpoints=manager, ema=ema, progress=False)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    manager.restore_best(fresh, averaged=True)
    for mine, averaged in zip(fresh.state_dict().values(), ema.model.state_dict().values()):
        assert torch.equal(mine, averaged)
    assert not torch.equal(fresh[0].weight, model[0].weight)  # the average, not the training's own
    plain = kk.CheckpointManager(tmp_path / "no")
    kk.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.utils.data.DataLoader(data, 16),
           kk.supervised(torch.nn.functional.mse_loss), epochs=1, checkpoints=plain, progress=False)
    with pytest.raises(ValueError, match="kept no moving average"):
        plain.restore_best(fresh, averaged=True)


def test_fold_models_are_exported_only_when_another_runtime_is_faster(tmp_path, monkeypatch):
    def model(k):
        torch.manual_seed(k)
        return torch.nn.Sequential(kk.mel.LogMel(n_fft=256, hop=256, n_mels=16), torch.nn.Flatten(),
                                   torch.nn.LazyLinear(3)).eval()
    models = {f"fold{k}": model(k) for k in range(3)}
    batch = torch.randn(4, 8000) * 0.1
    for m in models.values():
        m(batch)  # the lazy layer sized
    monkeypatch.setattr(kk.export, "_rate", lambda forward, samples, repeats: {True: 10.0}.get(repeats == 5, 1.0))
    monkeypatch.setattr(kk.export, "_openvino", lambda path, threads: None)
    rates = iter([1.0, 2.0])  # torch, then onnxruntime: ONNX Runtime the faster
    monkeypatch.setattr(kk.export, "_rate", lambda forward, samples, repeats: next(rates))
    done = kk.export.export_all(models, batch, tmp_path / "ort", threads=1)
    assert {e.chosen for e in done.values()} == {"onnxruntime"}
    assert sorted(p.name for p in (tmp_path / "ort").glob("*.onnx")) == ["fold0.onnx", "fold1.onnx", "fold2.onnx"]
    for name, e in done.items():  # each file its own fold's model
        with torch.inference_mode():
            assert np.abs(e.runner(models[name])(batch.numpy()) - models[name](batch).numpy()).max() < 1e-4
    rates = iter([2.0, 1.0])  # torch the faster: one file, timed once, the others stay torch modules
    done = kk.export.export_all(models, batch, tmp_path / "torch", threads=1)
    assert {e.chosen for e in done.values()} == {"torch"} and len(list((tmp_path / "torch").glob("*.onnx"))) == 1
    with torch.inference_mode():
        assert np.array_equal(done["fold2"].runner(models["fold2"])(batch.numpy()), models["fold2"](batch).numpy())


@pytest.mark.slow
def test_at_its_smoke_size_the_notebook_teaches_students_the_pool_fold_by_fold_in_rounds(tmp_path):
    """make test's run of the audio notebook (smoke: student_width=4) with up to three rounds: the fold CNNs label
    the four unlabelled train soundscapes (48 windows), each fold's round-1 student learns fold k's labelled
    windows and the pool as fold k's CNN heard it, round r + 1's as fold k's round-r student heard it, all on the
    teacher's folds; the rounds go on while CV rises, the best round's students are scored on the test, timed on
    the CPU beside a fold CNN, and counted in the rerun's plan. Run again, nothing trains. It reads as a report."""
    from test_notebooks import assert_reads_as_a_report

    from kagglekit.tools.notebook_runner import run_notebook
    run = lambda: run_notebook(REPO / "notebooks" / "audio_classification.ipynb",  # noqa: E731
                               {"smoke": True, "student_rounds": 3}, output_dir=tmp_path / "audio", progress=False)
    out = run()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["pool_windows"] == 4 * 12
    assert {"student", "test_student", "cnn", "mel_logreg"} <= set(metrics["scores"])
    assert 0.5 < metrics["scores"]["student"] <= 1 and set(metrics["rerun_ms_per_window"]) == {"teacher", "student"}
    cvs = list(metrics["student_rounds"].values())  # each round run only after one that beat the round before
    assert 2 <= len(cvs) <= 3 and all(b > a for a, b in zip(cvs, cvs[1:-1])), cvs
    assert len(cvs) == 3 or cvs[-1] <= cvs[-2], cvs  # fewer than three: the last did not beat the one before
    best = 1 + max(range(len(cvs)), key=cvs.__getitem__)
    assert metrics["scores"]["student"] == cvs[best - 1]
    planned = [u["name"] for u in metrics["rerun_plan"]["units"]]
    assert kk.rerunplan.training(metrics["rerun_plan"]) == []  # the students predict there; none trains
    assert {f"predict-audio-student-round{best}-fold0", f"predict-audio-student-round{best}-fold1",
            "predict-cnn-audio-fold0"} <= set(planned), planned
    units = {u["name"] for u in metrics["units"]} if isinstance(metrics["units"], list) else set(metrics["units"])
    assert {"pool", *(f"audio-student-round{r}-fold{k}" for r in range(1, len(cvs) + 1) for k in (0, 1))} <= units
    student = [line for line in metrics["summary"] if f"of the student (width 4, round {best} of {len(cvs)}"
               in line["result"]]
    assert student and student[0]["value"] == metrics["scores"]["student"], metrics["summary"]
    again = json.loads((run() / "metrics.json").read_text())
    assert again["student_rounds"] == metrics["student_rounds"]
    assert [k for k, v in again["chain"].items() if v == "computed" and "student" in k] == [], again["chain"]
    assert_reads_as_a_report(out, "audio_classification")


@pytest.mark.slow
@pytest.mark.e2e
def test_the_audio_notebook_beats_a_logistic_regression_on_the_mel_bands_and_plans_its_cpu_rerun(tmp_path):
    """Its defaults on the built-in stand-in: the CNN and BirdNET's embeddings against the plain reference on the
    same folds (the mean of the folds' scores, and on the six test soundscapes), the export checked, the rerun's
    plan made with BirdNET's rate in it."""
    from test_notebooks import assert_reads_as_a_report

    from kagglekit.tools.notebook_runner import run_notebook
    out = run_notebook(REPO / "notebooks" / "audio_classification.ipynb", {}, output_root=tmp_path, progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    scores = metrics["scores"]
    print({k: round(v, 4) for k, v in scores.items()}, metrics["export"])
    # CV as the mean of the folds' scores, every candidate alike (0.951 against 0.930 on 2026-11-30): pooled, the
    # reference's folds' calibrations had cost it 0.11 and the CNN 0.06
    assert scores["cnn"] > scores["mel_logreg"] + 0.01 and scores["test_cnn"] > scores["test_mel_logreg"] + 0.01
    # the pretrained model's features beat the plain ones too (0.9509 against 0.9296 on 2026-12-06; test 0.934, 0.824)
    assert scores["birdnet_logreg"] > scores["mel_logreg"] + 0.01
    assert scores["test_birdnet_logreg"] > scores["test_mel_logreg"] + 0.01
    assert metrics["export"]["largest_diff"] < 1e-4 and metrics["rerun_plan"]["fits"]
    assert "birdnet-embeddings" in [u["name"] for u in metrics["rerun_plan"]["units"]]  # the rerun embeds again
    assert kk.rerunplan.training(metrics["rerun_plan"]) == []  # it predicts there: a trained version is refused
    # the best on CV is submitted: the CNN with or without its EMA and BirdNET's head are within run-to-run noise
    # on this stand-in (0.9486, 0.9500 and 0.9509 on 2026-12-06; in CI run 87 the EMA's choice went the other way)
    assert metrics["choice"]["model"] == max(("cnn", "cnn_no_ema", "birdnet_logreg", "mel_logreg"), key=scores.get)
    assert metrics["submission"]["rows"] == 6 * 12
    submission = pd.read_csv(out / "submission.csv", dtype={"row_id": str})
    assert submission.columns[0] == "row_id" and submission.columns[1:].tolist() == sorted(submission.columns[1:])
    assert submission["row_id"].str.rsplit("_", n=1).str[1].astype(int).between(5, 60).all()
    assert ((submission.iloc[:, 1:] >= 0) & (submission.iloc[:, 1:] <= 1)).all().all()
    assert_reads_as_a_report(out, "audio_classification")


@pytest.mark.slow
@pytest.mark.e2e
def test_on_public_data_without_soundscapes_the_notebook_trains_and_writes_the_header_alone(tmp_path):
    """Kaggle's public BirdCLEF data has an empty test_soundscapes/ (the rerun brings them): the
    first version must still train, export and write a checked submission of no rows; with the
    soundscapes there, only their windows are embedded again."""
    from kagglekit.tools.notebook_runner import run_notebook
    folder = audiosynth.write_competition(tmp_path / "public", recordings=16, soundscapes=1, public=True)
    out = run_notebook(REPO / "notebooks" / "audio_classification.ipynb", {"data_dir": str(folder), "smoke": True},
                       output_root=tmp_path / "runs", progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    submission = pd.read_csv(out / "submission.csv")
    assert len(submission) == 0 and metrics["submission"]["rows"] == 0
    assert submission.columns.tolist() == pd.read_csv(folder / "sample_submission.csv").columns.tolist()
    assert metrics["export"]["largest_diff"] < 1e-4 and "test_cnn" not in metrics["scores"]
    # the scoring rerun brings the soundscapes: it embeds those alone, BirdNET's training windows are a hit
    hidden = audiosynth.write_competition(tmp_path / "hidden", recordings=16, soundscapes=1)
    shutil.copytree(hidden / "test_soundscapes", folder / "test_soundscapes", dirs_exist_ok=True)
    again = run_notebook(REPO / "notebooks" / "audio_classification.ipynb", {"data_dir": str(folder), "smoke": True},
                         output_root=tmp_path / "runs", progress=False)
    chain = json.loads((again / "metrics.json").read_text())["chain"]
    assert chain["cache:birdnet"] == "hit" and chain["cache:birdnet-test"] == "computed", chain
    assert len(pd.read_csv(again / "submission.csv")) == 12  # one soundscape's 5-second windows
