"""Where an Optuna study lives, and how its workers agree, for one machine or many.

- ``sqlite:///...``: the default, a file in the working dir (one machine).
- ``postgresql://user:password@host/db`` (any SQLAlchemy URL): one study shared by kernels
  or machines; heartbeats fail the trials of a dead worker and retry them.
- ``journal:<path>``: Optuna's journal file on a shared folder, the no-server
  alternative; the kit keeps heartbeats in the trials' system attributes there.
- ``env:NAME`` or ``secret:NAME``: the URL from an environment variable or a Kaggle
  secret, so a password never appears in a notebook, a parameter or metrics.json.

"Count the finished trials, then ask for one" must be atomic across every worker, or
the total overshoots: a file lock beside SQLite or the journal, a PostgreSQL advisory
lock for a database every machine reaches.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import threading
import time
from pathlib import Path

from ..machine import env

HEARTBEAT_ATTR = "kagglekit_heartbeat"


def resolve(spec: str) -> str:
    """The storage URL behind ``spec`` (``env:NAME``, ``secret:NAME`` or a URL/journal path)."""
    if spec.startswith("env:"):
        name = spec[4:]
        if not os.environ.get(name):
            raise ValueError(f"storage {spec!r}: the environment variable {name} is not set")
        return os.environ[name]
    if spec.startswith("secret:"):
        from kaggle_secrets import UserSecretsClient  # only inside a Kaggle kernel
        return UserSecretsClient().get_secret(spec[7:])
    return spec


def is_journal(url: str) -> bool:
    return url.startswith("journal:")


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql", "postgres:"))


def open_storage(url: str, heartbeat_s: int, grace_s: int, max_retry: int):
    import optuna
    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend
        return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    from sqlalchemy.exc import IntegrityError, ProgrammingError
    connect = {"timeout": 60} if url.startswith("sqlite") else {}  # SQLite: wait for writers
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(
                url, heartbeat_interval=heartbeat_s, grace_period=grace_s,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                    max_retry=max_retry),
                engine_kwargs={"connect_args": connect, "pool_pre_ping": True})
        except (IntegrityError, ProgrammingError):
            # Several machines creating the tables of a new database at once: one wins,
            # the others find them made a moment later.
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))


@contextlib.contextmanager
def locked(storage, url: str, name: str, lock_file: Path):
    """Exclusive among every worker of study ``name``: an advisory lock in PostgreSQL,
    else a file lock (the working dir, or the journal's shared folder)."""
    if is_postgres(url):
        from sqlalchemy import text
        key = int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)
        engine = getattr(storage, "_backend", storage).engine  # Optuna wraps RDB in a cache
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        return
    if is_journal(url):
        lock_file = Path(url.removeprefix("journal:") + ".kagglekit-lock")  # not Optuna's own .lock
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _beat(storage, trial_id: int) -> None:
    if hasattr(storage, "record_heartbeat"):
        storage.record_heartbeat(trial_id)
    else:
        storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())


@contextlib.contextmanager
def heartbeat(storage, trial_id: int, every_s: float):
    """Record the trial's heartbeat until the block ends (a dead process stops it)."""
    stop = threading.Event()

    def beat():
        while not stop.wait(every_s):
            _beat(storage, trial_id)

    _beat(storage, trial_id)
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def fail_stale(study, grace_s: float, max_retry: int) -> None:
    """Fail the running trials of dead workers and queue their parameters again.

    RDB storages do it through Optuna; for a journal the kit reads its own heartbeats."""
    import optuna
    if hasattr(study._storage, "record_heartbeat"):
        optuna.storages.fail_stale_trials(study)  # retries are queued as WAITING
        return
    now = time.time()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        last = t.system_attrs.get(HEARTBEAT_ATTR)
        if last is None or now - last < grace_s:
            continue
        if not study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL):
            continue  # another worker failed it first
        if len(t.system_attrs.get("retry_history", [])) < max_retry:
            study.add_trial(optuna.trial.create_trial(
                state=optuna.trial.TrialState.WAITING, params=t.params,
                distributions=t.distributions, user_attrs=t.user_attrs,
                system_attrs={"failed_trial": t.number,
                              "retry_history": [*t.system_attrs.get("retry_history", []), t.number]}))


def storage_url(path: Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def adopt_previous(db: Path, name: str) -> Path | None:
    """Copy the newest ``<name>.db`` found in the inputs into the working dir.

    Only when the working dir has none: this version's own study is never replaced.
    """
    if db.exists():
        return None
    found = [p for p in env.find_inputs(f"{name}.db") if p.is_file()]
    if not found:
        return None
    newest = max(found, key=lambda p: p.stat().st_mtime)
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(newest, db)  # the input is read-only; SQLite needs to write
    return newest
