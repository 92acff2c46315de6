"""Kaggle credentials: found, checked, never printed, logged or embedded."""
from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path


class CredentialsError(RuntimeError):
    """No usable Kaggle credentials."""


def kaggle_json() -> Path:
    folder = os.environ.get("KAGGLE_CONFIG_DIR") or str(Path.home() / ".kaggle")
    return Path(folder) / "kaggle.json"


def username() -> str:
    """The Kaggle user name, from KAGGLE_USERNAME + KAGGLE_KEY or kaggle.json.

    Warns when kaggle.json is readable by other users (chmod 600 fixes it).
    """
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return os.environ["KAGGLE_USERNAME"]
    path = kaggle_json()
    if not path.exists():
        raise CredentialsError(
            f"no Kaggle credentials: {path} does not exist and KAGGLE_USERNAME / KAGGLE_KEY are "
            "not set. Create an API token on kaggle.com (Settings > API), save it as "
            f"{path} and run `chmod 600 {path}`.")
    mode = path.stat().st_mode
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        warnings.warn(f"{path} is readable by other users of this machine; run `chmod 600 {path}`",
                      stacklevel=2)
    try:
        config = json.loads(path.read_text())
        name, key = config["username"], config["key"]
    except (ValueError, KeyError, TypeError):
        raise CredentialsError(f"{path} is not a valid kaggle.json (needs \"username\" and \"key\"); "
                               "download a fresh token from kaggle.com (Settings > API)") from None
    if not name or not key:
        raise CredentialsError(f"{path} has an empty username or key")
    return name


def secret_values() -> list[str]:
    """The secrets a build must never contain (for the artefact scan)."""
    found = [os.environ.get("KAGGLE_KEY", "")]
    path = kaggle_json()
    if path.exists():
        try:
            found.append(json.loads(path.read_text()).get("key", ""))
        except ValueError:
            pass
    return [s for s in found if len(s) >= 8]
