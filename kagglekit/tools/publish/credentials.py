"""Kaggle credentials: found, checked, never printed, logged or embedded.

Accepted as the kaggle CLI accepts them: ``KAGGLE_USERNAME`` + ``KAGGLE_KEY``, a
``kaggle.json``, or an access token (``KAGGLE_API_TOKEN`` holding the token or a path
to it, else ``~/.kaggle/access_token``). A token does not name its user; the CLI
asks the server (``kaggle config view``), and so does ``username()``.
"""
from __future__ import annotations

import json
import os
import re
import stat
import warnings
from pathlib import Path


class CredentialsError(RuntimeError):
    """No usable Kaggle credentials."""


def kaggle_json() -> Path:
    folder = os.environ.get("KAGGLE_CONFIG_DIR") or str(Path.home() / ".kaggle")
    return Path(folder) / "kaggle.json"


def _warn_if_readable(path: Path) -> None:
    if path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
        warnings.warn(f"{path} is readable by other users of this machine; run `chmod 600 {path}`",
                      stacklevel=3)


def access_token() -> str | None:
    """The access token the CLI would use, if any (never printed)."""
    value = os.environ.get("KAGGLE_API_TOKEN", "")
    if value and Path(value).expanduser().is_file():
        _warn_if_readable(Path(value).expanduser())
        return Path(value).expanduser().read_text().strip() or None
    if value:
        return value.strip()
    for name in ("access_token", "access_token.txt"):
        path = Path.home() / ".kaggle" / name
        if path.is_file():
            _warn_if_readable(path)
            return path.read_text().strip() or None
    return None


def username() -> str:
    """The Kaggle user name, from KAGGLE_USERNAME + KAGGLE_KEY, kaggle.json or a token.

    Warns when a credentials file is readable by other users (chmod 600 fixes it).
    """
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return os.environ["KAGGLE_USERNAME"]
    path = kaggle_json()
    if path.exists():
        return _from_kaggle_json(path)
    if access_token():
        return _from_token()
    raise CredentialsError(
        f"no Kaggle credentials: {path} does not exist, KAGGLE_USERNAME / KAGGLE_KEY are not set "
        "and there is no access token (KAGGLE_API_TOKEN or ~/.kaggle/access_token). Create one "
        f"on kaggle.com (Settings > API), save it as {path} and run `chmod 600 {path}`.")


def _from_kaggle_json(path: Path) -> str:
    _warn_if_readable(path)
    try:
        config = json.loads(path.read_text())
        name, key = config["username"], config["key"]
    except (ValueError, KeyError, TypeError):
        raise CredentialsError(f"{path} is not a valid kaggle.json (needs \"username\" and \"key\"); "
                               "download a fresh token from kaggle.com (Settings > API)") from None
    if not name or not key:
        raise CredentialsError(f"{path} has an empty username or key")
    return name


def _from_token() -> str:
    """The user a token belongs to, as the CLI's own introspection reports it."""
    if os.environ.get("KAGGLE_USERNAME"):
        return os.environ["KAGGLE_USERNAME"]
    from .kaggle_cli import KaggleError, run_cli
    try:
        out = run_cli("config", "view")
    except KaggleError as err:
        raise CredentialsError(f"the Kaggle access token was refused: {err}") from None
    found = re.search(r"username:\s*(\S+)", out)
    if not found or found.group(1) == "None":
        raise CredentialsError("the Kaggle access token is not valid (expired or revoked): "
                               "create a new one on kaggle.com (Settings > API)")
    return found.group(1)


def secret_values() -> list[str]:
    """The secrets a build must never contain (for the artefact scan): keys and tokens."""
    found = [os.environ.get("KAGGLE_KEY", ""), access_token() or ""]
    path = kaggle_json()
    if path.exists():
        try:
            found.append(json.loads(path.read_text()).get("key", ""))
        except ValueError:
            pass
    return [s for s in found if len(s) >= 8]
