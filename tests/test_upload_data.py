"""make upload-data: a folder as a private Kaggle dataset through the real kaggle CLI and the
loopback server; refused before any network call when it holds a credential or is too big."""
import io
import json
import zipfile

import pytest
from test_roundtrip import FakeKaggle, _cli, _env, build_in_tmp  # noqa: F401 (the fixture)

from kagglekit.tools.publish import upload


def data_folder(root):
    """The GNN write-up's kind of own data: CSVs at the top, a sub-folder of raw files."""
    root.mkdir()
    (root / "nodes.csv").write_text("id,feature\n1,0.5\n2,0.25\n")
    (root / "edges.csv").write_text("src,dst\n1,2\n")
    (root / "raw").mkdir()
    (root / "raw" / "part-0.txt").write_text("raw bytes\n")
    return root


@pytest.mark.slow
def test_a_folder_goes_up_private_is_versioned_when_changed_and_not_sent_again_unchanged(tmp_path):
    folder = data_folder(tmp_path / "mydata")
    with FakeKaggle() as kaggle:
        env = _env(kaggle, tmp_path)
        first = _cli("upload-data", str(folder), "my-graph-data", env=env)
        assert first.returncode == 0, first.stderr
        assert "tester/my-graph-data: created (3 files" in first.stdout and "private" in first.stdout
        dataset = kaggle.datasets["tester/my-graph-data"]
        assert dataset["private"] and dataset["title"] == "My graph data"
        sent = dataset["versions"][-1]
        assert set(sent) == {"nodes.csv", "edges.csv", "raw.zip"}  # the sub-folder as an archive
        assert zipfile.ZipFile(io.BytesIO(sent["raw.zip"])).read("part-0.txt") == b"raw bytes\n"
        meta = json.loads((folder / "dataset-metadata.json").read_text())
        assert meta["id"] == "tester/my-graph-data"  # written for the user, kept in the folder
        assert not list(folder.glob(".published*"))  # what was sent is remembered outside the folder

        again = _cli("upload-data", str(folder), "my-graph-data", env=env)
        assert "unchanged" in again.stdout and len(dataset["versions"]) == 1
        (folder / "edges.csv").write_text("src,dst\n1,2\n2,1\n")
        changed = _cli("upload-data", str(folder), "my-graph-data", "-m", "both directions", env=env)
        assert "new version" in changed.stdout and len(dataset["versions"]) == 2
        assert dataset["versions"][-1]["edges.csv"] == b"src,dst\n1,2\n2,1\n"


@pytest.mark.parametrize("name", ["kaggle.json", ".netrc", "id_ed25519", "server.pem", ".env"])
def test_a_credential_file_is_refused_before_any_network_call(tmp_path, name):
    folder = data_folder(tmp_path / "mydata")
    (folder / "raw" / name).write_text("{}")
    with pytest.raises(upload.UploadRefused, match=f"raw/{name}: looks like a credential file"):
        upload.check(folder, "my-graph-data")


def test_a_file_holding_the_kaggle_key_too_big_folders_and_bad_slugs_are_refused(tmp_path, monkeypatch):
    folder = data_folder(tmp_path / "mydata")
    monkeypatch.setenv("KAGGLE_KEY", "0123456789abcdef0123")
    (folder / "notes.txt").write_text("my key is 0123456789abcdef0123\n")
    with pytest.raises(upload.UploadRefused, match="notes.txt: holds your Kaggle API key"):
        upload.check(folder, "my-graph-data")
    (folder / "notes.txt").unlink()
    monkeypatch.setattr(upload, "LIMIT_BYTES", 10)
    with pytest.raises(upload.UploadRefused, match="over Kaggle's 0 GB for one dataset; split it"):
        upload.check(folder, "my-graph-data")
    with pytest.raises(upload.UploadRefused, match="SLUG='My_Data'"):
        upload.check(folder, "My_Data")
    with pytest.raises(upload.UploadRefused, match="no such folder"):
        upload.check(tmp_path / "missing", "my-graph-data")


def test_the_cli_says_the_refusal_in_one_line_and_sends_nothing(tmp_path):
    folder = data_folder(tmp_path / "mydata")
    (folder / "kaggle.json").write_text("{}")
    with FakeKaggle() as kaggle:
        done = _cli("upload-data", str(folder), "my-graph-data", env=_env(kaggle, tmp_path))
        assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
        assert "kaggle.json: looks like a credential file" in done.stderr
        assert kaggle.requests == [] and not (folder / "dataset-metadata.json").exists()  # not one call
