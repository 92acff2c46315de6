"""Bad data folders (issue 84): every pipeline that reads a competition's folder, given its own good
stand-in mutated in each way of tests/datamutations.py, either handles it (its reading succeeds and
what it read is consistent: every test id once) or refuses it before any training with the kit's
error naming what is wrong; never a library's traceback, never a silent wrong answer.

Each pipeline below is its notebook's first data cell as the notebook writes it (`run.data_dir(...)`
then the reader, the checks that cell makes): tests/test_datafolders.py reads the notebook's source
to check that the calls named here are the calls it makes.
"""
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from datamutations import MUTATIONS, Layout, mutated_copy
from test_timeseries import write_long_table

from kagglekit.audio import audiosynth, folder as audio
from kagglekit.images import folder as images, imagesets
from kagglekit.readers import csvfile, filecheck
from kagglekit.run import datadir
from kagglekit.score import scoring
from kagglekit.tables import competition, folder as tables, playground, timeseries
from kagglekit.text import textsets, translation
from kagglekit.volumes import folder as volumes

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Pipeline:
    notebook: str
    calls: tuple  # what its first data cell calls, as written there
    write: Callable  # folder -> the good stand-in written there
    required: tuple  # what its run.data_dir(...) asks for
    read: Callable  # data_dir -> what the notebook goes on with; raises to refuse
    test_ids: Callable  # what was read -> the ids the submission will hold
    layout: Layout
    wrong: Callable = lambda read: []  # what was read -> what is wrong with it (a class "", a file it cannot decode)
    table: bool = False  # its data_dir may be the table itself (run.data_dir(table=True))


def _unreadable(paths, check) -> list[str]:
    return [f"kept unreadable {paths[i].name}: {why}" for i, why in filecheck.problems(list(paths), check).items()]


def _blank_classes(classes) -> list[str]:
    blank = [c for c in classes if str(c).strip() in ("", "nan", "None")]
    return ([f"a class of no name: {blank[:2]}"] * bool(blank)
            + [f"one class only: {list(classes)}"] * (len(classes) < 2))


def _quickstart(given: Path):
    """quickstart's reading of a competition: train.csv's classes, then test.csv through the same steps."""
    dataset, info = tables.read_labelled(given, "Fertilizer Name")
    folder = given if given.is_dir() else given.parent
    competition = any(folder.rglob("sample_submission.csv"))
    test_frame, _ = tables.read_test(folder, info["prep"]) if competition else (None, None)
    return dataset, info, test_frame


def _series(given: Path):
    """timeseries_forecast's reading: one long table, its time, target, feature and series columns."""
    return timeseries.load(given, time="date", target="sales", features=["promo"], series="store")


def _series_gaps(read) -> list[str]:
    frame, channels = read
    gaps = int(frame[channels[0]].isna().sum())
    return [f"{gaps} targets missing in the windows"] * bool(gaps)


def _tabular(folder: Path):
    comp = competition.read(folder, "", classification=True)
    scoring.get("map@3", len(comp.classes or [])).check_sample(
        csvfile.read(folder / "sample_submission.csv", nrows=5), comp.target)
    return comp


PIPELINES = (
    Pipeline("image_classification", ('run.data_dir(["sample_submission.csv"])', "kk.images.read_competition("),
             lambda d: imagesets.write_competition(d), ("sample_submission.csv",),
             lambda f: images.read_competition(f, "label"), lambda c: c.test_ids,
             Layout("label", "train_images/*", "test_images/*", test_table=""),
             lambda c: _blank_classes(c.classes) + _unreadable(c.paths, filecheck.image_problem)),
    Pipeline("audio_classification", ('run.data_dir(["sample_submission.csv", "train.csv"])',
                                      "kk.audio.read_competition("),
             lambda d: audiosynth.write_competition(d, recordings=24, soundscapes=2),
             ("sample_submission.csv", "train.csv"), audio.read_competition,
             lambda c: [(s.name, k) for s in c.soundscapes for k in range(1)],
             Layout("primary_label", "train_audio/*/*.ogg", "test_soundscapes/*.ogg", test_table=""),
             lambda c: _unreadable(c.clips + c.soundscapes, filecheck.audio_problem)),
    Pipeline("text_classification", ('run.data_dir(["train.csv"])', "kk.textsets.read_competition("),
             lambda d: textsets.write_competition(d, 240, 60), ("train.csv",),
             lambda f: textsets.read_competition(f, "text", "label"), lambda c: list(c.test[c.id_column]),
             Layout("label"), lambda c: _blank_classes(c.classes)),
    Pipeline("text_generation", ('run.data_dir(["train.csv"])', "kk.translation.read_competition("),
             lambda d: translation.write_competition(d, 200, 30), ("train.csv",),
             lambda f: translation.read_competition(f, "source", "target"), lambda c: list(c.test[c.id_column]),
             Layout("target")),
    Pipeline("tabular", ('run.data_dir(["train.csv", "test.csv", "sample_submission.csv"])', "kk.competition.read("),
             lambda d: playground.write(d, 300, 100, 0), ("train.csv", "test.csv", "sample_submission.csv"),
             _tabular, lambda c: list(c.test_ids), Layout("Fertilizer Name"), lambda c: _blank_classes(c.classes)),
    Pipeline("quickstart", ("run.data_dir(table=True)", "kk.tables.read_labelled(", "kk.tables.read_test("),
             lambda d: playground.write(d, 300, 100, 0), (), _quickstart,
             lambda r: [] if r[2] is None else list(r[2]["id"]), Layout("Fertilizer Name"),
             lambda r: _blank_classes(r[1]["classes"]), table=True),
    Pipeline("timeseries_forecast", ("kk.timeseries.load(run.data_dir()",),
             lambda d: write_long_table(d).parent, (), _series, lambda r: [], Layout("sales", test_table=""),
             _series_gaps, table=True),
    Pipeline("segmentation_3d", ('run.data_dir(["train.csv", "test.csv"])', "kk.volumes.read_layout("),
             lambda d: volumes.write_synthetic(d, [16, 16, 24], [16], seed=0), ("train.csv", "test.csv"),
             volumes.read_layout, lambda c: list(c.test_ids),
             Layout("", "train_images/*.tif", "test_images/*.tif", test_table="test.csv"),
             lambda c: _unreadable(c.files(c.train_ids) + [c.test_image(v).path for v in c.test_ids],
                                   filecheck.tiff_problem)),
)


def outcome(pipeline: Pipeline, given: Path) -> tuple[str, str]:
    """("handled" | "refused" | "FAIL", what was said)."""
    try:
        folder = datadir.resolve(str(given), pipeline.required, table=pipeline.table)
        read = pipeline.read(folder)
    except Exception as err:  # noqa: BLE001 (the point: which error, and what it says)
        said = f"{type(err).__name__}: {err}"
        ours = type(err).__module__.startswith("kagglekit")
        return ("refused" if ours and len(str(err)) > 20 else "FAIL"), said
    ids = [str(i) for i in pipeline.test_ids(read)]
    if len(set(ids)) != len(ids):
        return "FAIL", f"read on, but the submission would hold {len(ids) - len(set(ids))} ids twice"
    sample = Path(folder) / "sample_submission.csv"
    if pipeline.layout.test_table and sample.exists():  # the final check compares the submission's ids with these
        wanted = set(csvfile.read(sample, dtype=str).iloc[:, 0])
        if wanted != set(ids):
            return "FAIL", f"read on, but the sample's ids are not the test's ({len(wanted ^ set(ids))} differ)"
    wrong = pipeline.wrong(read)
    return ("FAIL", f"read on, but: {'; '.join(wrong)[:200]}") if wrong else ("handled", "")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    return {p.notebook: p.write(root / p.notebook) for p in PIPELINES}


@pytest.mark.parametrize("pipeline", PIPELINES, ids=lambda p: p.notebook)
def test_the_pipelines_are_their_notebooks_first_data_cells(pipeline):
    cells = json.loads((REPO / "notebooks" / f"{pipeline.notebook}.ipynb").read_text())["cells"]
    source = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert [call for call in pipeline.calls if call not in source] == []


@pytest.mark.parametrize("pipeline", PIPELINES, ids=lambda p: p.notebook)
def test_every_good_stand_in_is_read(pipeline, good):
    assert outcome(pipeline, good[pipeline.notebook]) == ("handled", "")


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__)
def test_every_mutation_is_handled_or_refused_by_name_on_every_pipeline(mutation, good, tmp_path, capsys):
    table = []
    for pipeline in PIPELINES:
        given = mutated_copy(good[pipeline.notebook], tmp_path / pipeline.notebook, mutation, pipeline.layout)
        if given is None:
            continue
        started = time.monotonic()
        verdict, said = outcome(pipeline, given)
        table.append((pipeline.notebook, verdict, round(time.monotonic() - started, 2), said[:160]))
    with capsys.disabled():
        for row in table:
            print(f"\n{mutation.__name__} | " + " | ".join(map(str, row)), end="")
    assert [row for row in table if row[1] == "FAIL"] == []
