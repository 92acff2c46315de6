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
