"""The face: ``kk.<name>`` is what its table says at run time and what the stub says to mypy, and
``make lint`` type-checks the notebooks' cells through it (a wrong keyword fails lint, not a kernel)."""
import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kagglekit as kk
from kagglekit.tools import facestub

REPO = Path(__file__).resolve().parents[1]
FACE = vars(kk)


def test_the_stub_is_written_from_the_tables():
    assert facestub.STUB.read_text() == facestub.render(), "run: python -m kagglekit.tools.facestub"


def test_every_face_name_is_what_the_stub_says_it_is():
    stub = ast.parse(facestub.STUB.read_text())
    said = {alias.asname: ".".join(filter(None, ["kagglekit", node.module,
                                                  None if alias.asname in FACE["_EXPORTS"] else alias.name]))
            for node in stub.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    for name in FACE["_SUBMODULES"]:
        assert getattr(kk, name).__name__ == said[name], name
    for name in FACE["_EXPORTS"]:
        assert getattr(kk, name) is getattr(importlib.import_module(said[name]), name), name


def test_a_room_is_its_kind_and_its_reader_s_names_are_on_it():
    """kk.images stays the images room after any of its modules is imported (Python sets a package's
    attribute when it imports a subpackage: the face's name and the package's must be one object)."""
    from kagglekit.images import augment2d, folder  # noqa: F401
    assert kk.images.__name__ == "kagglekit.images" and kk.images.read_competition is folder.read_competition
    assert kk.text.load_classifier.__module__ == "kagglekit.text.classifier"
    assert kk.images.augment2d is augment2d
    with pytest.raises(AttributeError, match="nor has its reader kagglekit.tables.folder"):
        kk.tables.no_such_name  # noqa: B018


def test_the_tables_rooms_and_floors_are_the_folders():
    sys.path.insert(0, str(REPO / "tests"))
    from test_architecture import ORDER, ROOMS
    assert list(FACE["_FLOORS"]) == ORDER and list(FACE["_ROOMS"]) == ROOMS


def _planted(tmp_path: Path, *mistakes: tuple[str, str]) -> Path:
    """quickstart.ipynb with each (right, wrong) text of its call of kk.fit replaced once."""
    notebook = json.loads((REPO / "notebooks" / "quickstart.ipynb").read_text())
    cell = next(c for c in notebook["cells"] if "kk.fit(" in "".join(c["source"]))
    source = "".join(cell["source"])
    call = source.index("kk.fit(")
    for right, wrong in mistakes:
        assert right in source[call:]
        source = source[:call] + source[call:].replace(right, wrong, 1)
    cell["source"] = source
    folder = tmp_path / "notebooks"
    folder.mkdir()
    (folder / "quickstart.ipynb").write_text(json.dumps(notebook))
    return folder


@pytest.mark.skipif(not shutil.which("nbqa", path=str(Path(sys.executable).parent)), reason="nbqa: make setup")
def test_a_wrong_keyword_or_type_to_fit_in_a_notebook_fails_lint(tmp_path):
    folder = _planted(tmp_path, ("evaluate=", "evaluat="), ("epochs=epochs", "epochs=str(epochs)"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)  # the lint's own settings ([tool.nbqa.addopts])
    assert folder.is_dir()
    done = subprocess.run([str(Path(sys.executable).parent / "nbqa"), "mypy", "notebooks",
                           f"--cache-dir={tmp_path / '.mypy_cache'}", "--no-color-output"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MYPYPATH": str(REPO)})  # the kit as make lint sees it
    assert done.returncode != 0
    assert 'Unexpected keyword argument "evaluat" for "fit"' in done.stdout, done.stdout[-2000:]
    assert 'Argument "epochs" to "fit" has incompatible type "str"; expected "int"' in done.stdout, done.stdout[-2000:]
