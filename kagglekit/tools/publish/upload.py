"""``make upload-data DIR=... SLUG=...``: one's own folder as a private Kaggle dataset.

The step before a first push when the data is not on Kaggle yet (the GNN write-up's own data,
a competition's external data): the folder goes up through the real kaggle CLI as a private
dataset, created the first time and versioned after, each sub-folder as an archive Kaggle
unpacks. ``dataset-metadata.json`` (what the CLI reads: title, id, licence) is written into the
folder for the user the first time, and kept after (edit its title or licence freely).

Refused before any network call, naming the file and the fix:
- a credential file in the folder (kaggle.json, .netrc, SSH or TLS keys, .env, ...) or a file
  holding this machine's Kaggle key: a dataset would publish it to whoever it is shared with;
- a folder over Kaggle's size limit for one dataset (``LIMIT_BYTES``: 200 GB by Kaggle's dataset
  documentation, read through secondary sources on 2026-11-27; check the website);
- a slug Kaggle would refuse, an empty folder, a metadata file naming another dataset.
What was uploaded is remembered outside the folder (``build/uploads/``): an unchanged
folder is not sent again.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import credentials, metadata
from .build import build_root

LIMIT_BYTES = 200 * 10**9
METADATA = "dataset-metadata.json"
CREDENTIAL_NAMES = {"kaggle.json", ".netrc", "_netrc", ".git-credentials", "credentials", "credentials.json",
                    ".env", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "access_token", ".pypirc"}
CREDENTIAL_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".keystore")
SCANNED_BYTES = 1 << 20  # files up to this size are searched for the Kaggle key itself


class UploadRefused(ValueError):
    """The folder cannot go up as it is (the file and the fix in the message)."""


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file to upload: relative path -> (bytes, modification time in ns)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != METADATA:
            stat = path.stat()
            found[path.relative_to(folder).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def check(folder: Path, slug: str) -> dict[str, tuple[int, int]]:
    """The folder's files, once nothing in it or in the slug would be refused (see the module)."""
    if not metadata.SLUG.match(slug):
        raise UploadRefused(f"SLUG={slug!r}: a dataset slug is 5-50 lower-case letters, digits or dashes, "
                            "starting and ending with a letter or digit")
    if not folder.is_dir():
        raise UploadRefused(f"DIR={folder}: no such folder")
    files = files_of(folder)
    if not files:
        raise UploadRefused(f"DIR={folder}: holds no file to upload")
    secrets = credentials.secret_values()
    for name, (size, _) in files.items():
        path = folder / name
        if path.name.lower() in CREDENTIAL_NAMES or path.name.lower().endswith(CREDENTIAL_SUFFIXES):
            raise UploadRefused(f"{path}: looks like a credential file; a dataset would hand it to whoever "
                                "the dataset is shared with. Move it out of DIR and upload again")
        if secrets and size <= SCANNED_BYTES and any(s in path.read_text(errors="ignore") for s in secrets):
            raise UploadRefused(f"{path}: holds your Kaggle API key; remove it from the file and upload again")
    total = sum(size for size, _ in files.values())
    if total > LIMIT_BYTES:
        raise UploadRefused(f"DIR={folder}: {total / 1e9:.1f} GB, over Kaggle's {LIMIT_BYTES / 1e9:.0f} GB for "
                            "one dataset; split it into several datasets (one SLUG each)")
    return files


def write_metadata(folder: Path, ref: str, title: str) -> Path:
    """``dataset-metadata.json`` for ``ref``, written once; one naming another dataset is refused."""
    path = folder / METADATA
    if path.exists():
        found = json.loads(path.read_text()).get("id")
        if found != ref:
            raise UploadRefused(f"{path} names the dataset {found!r}, not {ref!r}: give SLUG={found.split('/')[-1]} "
                                f"or remove {path.name}")
        return path
    path.write_text(json.dumps({"title": title, "id": ref, "licenses": [{"name": "other"}]}, indent=2) + "\n")
    print(f"{path}: written (title {title!r}, licence 'other'; edit them before the next upload if you like)")
    return path


def add_command(sub) -> None:
    """``kagglekit upload-data DIR SLUG``, on the command line's sub-commands."""
    parser = sub.add_parser("upload-data", help="a folder of yours as a private Kaggle dataset")
    parser.add_argument("folder", help="the folder to upload (DIR=)")
    parser.add_argument("slug", help="the dataset's slug under your account (SLUG=)")
    parser.add_argument("-m", "--message", default="", help="the version's notes")
    parser.add_argument("--title", default="", help="the dataset's title the first time (default: from the slug)")
    parser.set_defaults(func=lambda args: print(upload(Path(args.folder), args.slug, args.message, args.title)) or 0)


def upload(folder: Path, slug: str, message: str = "", title: str = "") -> str:
    """Check, then create or version ``<you>/<slug>`` from ``folder``; what was done, in words."""
    from .wheels import publish_folder
    folder = Path(folder).expanduser().resolve()
    files = check(folder, slug)
    owner = credentials.username()  # no credentials, no upload: said before anything is written
    ref = f"{owner}/{slug}"
    write_metadata(folder, ref, title or slug.replace("-", " ").capitalize())
    record = build_root().parent / "uploads" / f"{owner}-{slug}.json"  # build/uploads: never in DIR itself
    record.parent.mkdir(parents=True, exist_ok=True)
    size = sum(s for s, _ in files.values())
    done = publish_folder(folder, ref, {k: list(v) for k, v in files.items()},
                          message or f"make upload-data: {len(files)} files", dir_mode="zip", record=record)
    return f"{done} ({len(files)} files, {size / 2**20:.1f} MiB, private)"
