"""``make publish NB=<name> TO=model``: a finished run's weights as a Kaggle Model version.

The same folder ``weights.assemble`` builds for the dataset route (the kit's checkpoint layout,
metrics.json, ``kagglekit-manifest.json``), uploaded with kagglehub's ``model_upload`` as the
variation ``<owner>/<kernel slug>-weights/pyTorch/<variation>``: the first upload creates the
model (private) and the variation, each later one adds a version. Models keep the folder's tree
as it is (a dataset upload zips sub-folders), and a kernel attaches one exact version by handle.

The version Kaggle gave is recorded beside the folder (``<slug>-weights.model.json``); a kernel
whose metadata says ``"weights_from": "<name>", "weights_via": "model"`` attaches that version
through ``model_sources`` (``metadata.kaggle_metadata``), the notebook finds it by searching its
inputs as it finds a dataset, and ``published.verify_inputs`` checks it against the manifest.
"""
from __future__ import annotations

import time
from pathlib import Path

from ...state import atomic
from . import credentials, metadata, weights
from .layout import VARIATION, model_handle, model_record, model_record_path

IGNORED = [".*", "dataset-metadata.json"]  # upload records and the dataset route's own metadata


class ModelPublishError(RuntimeError):
    """Kaggle refused the model upload, or the new version never appeared."""


def require_published(name: str, trained: dict, owner: str) -> None:
    """Before a push: a kernel attaching kernel ``name``'s weights (``trained``: its metadata) as a
    Model attaches a version that exists. Without a record here (another machine, ``make clean``),
    Kaggle's current version is asked for and recorded; with none there either, refused by name
    before any upload."""
    if model_record(trained) is not None:
        return
    model = model_handle(owner, trained)
    version = current_version(model)
    if version == 0:
        raise metadata.MetadataError(
            f"{model} has no version on Kaggle (and none is recorded in {model_record_path(trained)}): "
            f"make publish NB={name} TO=model first")
    atomic.write_json(model_record_path(trained), {"handle": model, "version": version, "files": None})


def current_version(model: str) -> int:
    """The variation's current version number, 0 when it does not exist yet."""
    from kagglehub.clients import build_kaggle_client
    from kagglehub.exceptions import KaggleApiHTTPError, handle_call
    from kagglehub.handle import parse_model_handle
    from kagglesdk.models.types.model_api_service import ApiGetModelInstanceRequest
    h = parse_model_handle(model)
    request = ApiGetModelInstanceRequest()
    request.owner_slug, request.model_slug = h.owner, h.model
    request.framework, request.instance_slug = h.framework_enum(), h.variation
    try:
        with build_kaggle_client() as client:
            return handle_call(lambda: client.models.model_api_client.get_model_instance(request)).version_number
    except KaggleApiHTTPError as err:
        if err.response is not None and err.response.status_code == 404:
            return 0
        raise


def publish(name: str, run: str = "", optimizer: bool = False, message: str = "",
            variation: str = VARIATION, timeout_s: float = 600) -> str:
    """Assemble ``name``'s weights and upload them as a new version of their Model variation,
    unless the last recorded version has the same files; what was done, in words."""
    owner = credentials.username()  # before any work: publishing needs an account
    meta = metadata.load(Path("kernel-metadata") / f"{name}.json")
    folder, manifest = weights.assemble(name, Path(run) if run else weights.source_run(name, meta), optimizer)
    model = model_handle(owner, meta, variation)
    before = current_version(model)
    last = model_record(meta)
    if last and last["handle"] == model and last["files"] == manifest["files"] and before >= last["version"]:
        return f"{model}/{last['version']}: unchanged"
    import kagglehub
    from kagglehub.exceptions import BackendError, KaggleApiHTTPError
    try:
        kagglehub.model_upload(model, str(folder), license_name="Apache 2.0", ignore_patterns=IGNORED,
                               version_notes=message or f"make publish: {manifest['source']}")
    except (BackendError, KaggleApiHTTPError) as err:
        raise ModelPublishError(f"Kaggle refused the upload of {model}: {err}") from None
    version = _wait_for_version(model, before, timeout_s)
    atomic.write_json(model_record_path(meta), {"handle": model, "version": version, "files": manifest["files"]})
    return (f"{model}/{version}: {'created' if before == 0 else 'new version'} "
            f"(attach it with \"weights_from\": \"{name}\", \"weights_via\": \"model\")")


def _wait_for_version(model: str, before: int, timeout_s: float, poll_s: float = 2.0) -> int:
    """The new version's number, once Kaggle lists it as the variation's current one."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = current_version(model)
        if now > before:
            return now
        if time.monotonic() > deadline:
            raise ModelPublishError(f"{model}: still at version {before} {timeout_s:.0f} s after the upload; "
                                    "look at it on kaggle.com and make publish again")
        time.sleep(poll_s)
