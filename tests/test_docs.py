"""The docs name only what exists: every ``kagglekit.<module or attribute>`` path in the README
and docs/ resolves, and every relative link points at a file of the repository."""
import importlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def resolves(path: str) -> bool:
    """``a.b.c``: the longest importable module prefix, then attributes for the rest."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_module_path_in_the_docs_imports():
    paths = {m for doc in DOCS for m in re.findall(r"\bkagglekit(?:\.[A-Za-z_]\w*)+", doc.read_text())}
    assert len(paths) > 20  # the docs do name them
    assert sorted(p for p in paths if not resolves(p)) == []


def test_the_check_catches_a_path_that_moved():
    assert resolves("kagglekit.loop.train.fit") and resolves("kagglekit.state.checkpoint")
    assert not resolves("kagglekit.launcher.context") and not resolves("kagglekit.parallel.launcher.effective_batch")
    assert not resolves("kagglekit.data.make_loader")  # kk.data became kk.loaders


def test_links_point_at_files_and_the_readme_stays_short():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name}: {target}"
    assert len((REPO / "README.md").read_text().splitlines()) < 160


RESULTS_MD = REPO / "benchmarks" / "RESULTS.md"  # what holds now
HISTORY = "\n".join(p.read_text() for p in sorted((REPO / "benchmarks" / "history").glob("*.md")))  # the diary
RESULTS = RESULTS_MD.read_text() + "\n" + HISTORY  # where a quoted figure must be found
FIGURE = re.compile(r"(?<![\w.\-/@])(x?\d+\.\d+%?|\d+%|\d+m\d+s)(?![\w.]*\d)")
# Figures from outside this repository, each with its source, which the sentence quoting it names.
OUTSIDE = {
    "81.5": ("paper", "the GCN paper (Kipf & Welling 2017), Cora"),
    "70.3": ("paper", "the GCN paper (Kipf & Welling 2017), CiteSeer"),
    "79.0": ("paper", "the GCN paper (Kipf & Welling 2017), PubMed"),
    "0.30": ("competition", "the Vesuvius competition's score: 0.30 TopoScore"),
    "0.35": ("competition", "the Vesuvius competition's score: 0.35 SurfaceDice, 0.35 VOI"),
    "6.0": ("capabilit", "CUDA compute capability (P100)"),
    "7.0": ("capabilit", "CUDA compute capability (V100)"),
    "7.5": ("capabilit", "CUDA compute capability (T4)"),
    "8.0": ("capabilit", "CUDA compute capability (A100)"),
    "3.12": ("Python", "Kaggle's image's Python (docker-python #1516)"),
}
# Thresholds the kit or a kernel's metadata sets, not measurements: where each is set.
SETTINGS = {"70%": "kagglekit/tools/publish/comparison.py", "5%": "kagglekit/tools/publish/comparison.py",
            "10%": "kagglekit/tools/publish/comparison.py", "0.70": "kernel-metadata/gnn_elliptic.json",
            "1.8": "kernel-metadata/gpu_figures.json", "0.6": "kernel-metadata/gpu_figures.json",
            "0.005": "kernel-metadata/gpu_figures.json", "0.80": "kernel-metadata/gnn_elliptic.json",
            "1.5": "tests/test_train.py"}


def _in_results(figure: str, results: str = RESULTS) -> bool:
    return re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", results) is not None


def _set_in(figure: str, path: Path) -> bool:
    """Is the setting ``figure`` (70% is also 70 or 0.7) a number written in ``path``?"""
    value = float(figure.rstrip("%"))
    wanted = {value, value / 100} if figure.endswith("%") else {value}
    return any(float(n) in wanted for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", path.read_text()))


def unsourced(text: str, results: str = RESULTS) -> list[str]:
    """The figures of ``text`` that ``results`` (benchmarks/RESULTS.md and its diary) does not
    hold, that are no outside figure quoted beside its source, and no setting of the repository's."""
    found, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        around = " ".join(lines[max(0, i - 1):i + 2]).lower()  # a sentence wraps: the lines beside it too
        for figure in FIGURE.findall(line):
            if _in_results(figure, results):
                continue
            if figure in OUTSIDE and OUTSIDE[figure][0].lower() in around:
                continue
            if figure in SETTINGS and _set_in(figure, REPO / SETTINGS[figure]):
                continue
            found.append(f"{figure}: {line.strip()[:100]}")
    return found


def test_every_figure_the_docs_quote_is_measured_here_or_names_its_source():
    for doc in DOCS:
        assert unsourced(doc.read_text()) == [], doc.name


def test_results_md_is_what_holds_now_each_figure_from_the_diary():
    """RESULTS.md is short enough to read, quotes no figure the dated diary does not hold (a figure is
    measured once, written down with its day, then quoted), and says which cards were lent."""
    text = RESULTS_MD.read_text()
    assert len(text.splitlines()) <= 400
    assert unsourced(text, HISTORY) == []
    assert "H100" in text and "H200" in text and "no GPU was lent" not in text.lower()
    assert "| figure | value | beside it | machine | date | command |" in text


def test_a_figure_no_result_holds_is_caught():
    assert unsourced("the stack scores 0.9963 on CV") == []  # RESULTS.md holds it
    assert unsourced("the hill climb scores 0.9987 on CV") == ["0.9987: the hill climb scores 0.9987 on CV"]
    assert unsourced("PubMed reaches 79.0") == ["79.0: PubMed reaches 79.0"]  # the paper, not named
    assert unsourced("the GCN paper's 79.0 on PubMed") == []


COUNT_WORDS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                          "thirteen fourteen fifteen sixteen seventeen".split())}


def test_the_counts_the_docs_and_the_makefile_give_are_the_repositorys():
    notebooks = len(list((REPO / "notebooks").glob("*.ipynb")))
    kernels = len(list((REPO / "kernel-metadata").glob("*.json")))
    for doc in [*DOCS, REPO / "Makefile"]:
        for word, what in re.findall(r"\b(?:all|the|every|sandbox's) (\w+) (notebooks|kernels)\b", doc.read_text()):
            count = COUNT_WORDS.get(word.lower(), int(word) if word.isdigit() else None)
            if count is not None and count > 1:
                assert count == {"notebooks": notebooks, "kernels": kernels}[what], f"{doc.name}: {word} {what}"
