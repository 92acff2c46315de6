"""kernel-metadata/<notebook>.json: the kit's own format, validated before any network call.

The file holds what differs per notebook (slug, title, sources, privacy, internet,
the parameters it runs with on Kaggle); ``kaggle_metadata`` turns it into the
kernel-metadata.json that ``kaggle kernels push`` reads, with the owner taken
from the user's credentials, never from the file.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import layout

CURRENT_SHAPES = {"NvidiaTeslaT4": "GPU T4 x2"}
RETIRED_SHAPES = {"NvidiaTeslaP100": "retired by Kaggle; sessions land on T4 anyway"}
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{3,48}[a-z0-9]$")  # Kaggle's rule for kernel and dataset slugs
_OWNER_SLUG = re.compile(r"^[A-Za-z0-9_-]+/[a-z0-9][a-z0-9-]*[a-z0-9](/\d+)?$")  # "/N": a version
_MODEL = re.compile(r"^[^/\s]+/[^/\s]+/[^/\s]+/[^/\s]+/\d+$")
KNOWN = {"slug", "title", "notebook", "is_private", "enable_internet", "enable_tpu",
         "machine_shape", "docker_image_pinning_type", "dataset_sources", "competition_sources",
         "kernel_sources", "model_sources", "keywords", "resume_from_previous_version",
         "parameters", "sandbox", "wheels", "code_competition", "criteria", "weights_from",
         "weights_via"}
WEIGHTS_VIA = ("dataset", "model")  # how make publish's weights reach the kernel that predicts with them
PINNING = ("original", "latest")  # keep the image a kernel first ran on, or take the newest


class MetadataError(ValueError):
    """Invalid kernel metadata; the message names the file, the field and the fix."""


def slugify(title: str) -> str:
    """Kaggle's slug of a title: lower case, runs of other characters become one dash."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _check_sources(meta: dict, problems: list) -> None:
    rules = {"dataset_sources": (_OWNER_SLUG, "owner/dataset-slug"),
             "kernel_sources": (_OWNER_SLUG, "owner/kernel-slug"),
             "competition_sources": (re.compile(r"^[a-z0-9][a-z0-9-]*$"), "competition-slug"),
             "model_sources": (_MODEL, "owner/model/framework/variation/version")}
    for field, (pattern, form) in rules.items():
        value = meta.get(field, [])
        if not isinstance(value, list):
            problems.append((field, f"must be a list of {form!r} strings"))
            continue
        for item in value:
            if not isinstance(item, str) or not pattern.match(item):
                problems.append((field, f"{item!r} is not of the form {form!r}"))


def validate(meta: dict, path: Path, notebooks_dir: Path = Path("notebooks")) -> None:
    """Raise MetadataError listing every problem, each with its field and fix."""
    problems = []
    for key in sorted(set(meta) - KNOWN):
        problems.append((key, f"unknown field (Kaggle ignores unknown keys silently); known: "
                              f"{', '.join(sorted(KNOWN))}"))
    slug, title = meta.get("slug", ""), meta.get("title", "")
    if not isinstance(slug, str) or not SLUG.match(slug):
        problems.append(("slug", f"{slug!r} must be 5-50 lower-case letters, digits or dashes, "
                                 "without owner or version (the owner comes from your credentials)"))
    if not isinstance(title, str) or len(title) < 5:
        problems.append(("title", f"{title!r} must have at least 5 characters"))
    elif isinstance(slug, str) and slugify(title) != slug:
        problems.append(("title", f"{title!r} slugifies to {slugify(title)!r}, not the slug "
                                  f"{slug!r}: make them agree or Kaggle may create another kernel"))
    notebook = notebooks_dir / f"{meta.get('notebook', path.stem)}.ipynb"
    if not notebook.exists():
        problems.append(("notebook", f"{notebook} does not exist"))
    for field in ("is_private", "enable_internet"):
        if not isinstance(meta.get(field), bool):
            problems.append((field, f"must be set explicitly to true or false (got "
                                    f"{meta.get(field)!r}); the CLI defaults enable_internet to TRUE"))
    shape_problem = check_shape(meta.get("machine_shape"))
    if shape_problem:
        problems.append(("machine_shape", shape_problem))
    if not isinstance(meta.get("enable_tpu", False), bool):
        problems.append(("enable_tpu", f"must be true or false (got {meta.get('enable_tpu')!r})"))
    elif meta.get("enable_tpu"):
        problems.append(("enable_tpu", "a TPU session has no CUDA GPU for the kit: set false"))
    pinning = meta.get("docker_image_pinning_type", "original")
    if pinning not in PINNING:
        problems.append(("docker_image_pinning_type", f"{pinning!r} must be one of {PINNING}"))
    _check_sources(meta, problems)
    if meta.get("competition_sources") and not isinstance(meta.get("code_competition"), bool):
        problems.append(("code_competition", "a competition kernel must say true (a code competition: "
                                             "Kaggle reruns the notebook on the hidden test set) or "
                                             "false (a file competition: its submission file is "
                                             "uploaded)"))
    _check_parameters(meta, notebook, problems)
    _check_criteria(meta.get("criteria", {}), problems)
    _check_weights(meta, path, problems)
    wheels = meta.get("wheels", [])
    if not (isinstance(wheels, list) and all(isinstance(w, str) and w for w in wheels)):
        problems.append(("wheels", "must be a list of package names Kaggle's image lacks "
                                   "(pinned in requirements.txt), e.g. [\"torch-geometric\"]"))
    if problems:
        lines = "\n".join(f"  {path}: {field}: {why}" for field, why in problems)
        raise MetadataError(f"invalid kernel metadata:\n{lines}")


def _check_weights(meta: dict, path: Path, problems: list) -> None:
    """``weights_from``: a kernel beside this one, whose attached base models this one attaches too;
    ``weights_via``: how its published weights arrive."""
    source = meta.get("weights_from")
    if source is not None and not (path.parent / f"{source}.json").exists():
        problems.append(("weights_from", f"{source!r} names no kernel in {path.parent}/: the kernel whose "
                                         "make publish weights this one predicts with"))
    elif source is not None:
        trained = json.loads((path.parent / f"{source}.json").read_text()).get("model_sources", [])
        for base in sorted(set(trained) - set(meta.get("model_sources", []))):
            problems.append(("model_sources", f"{base!r} is missing: {source}'s weights (adapters, heads) were "
                                              "trained on it; attach the same version"))
    if meta.get("weights_via", "dataset") not in WEIGHTS_VIA or (meta.get("weights_via") and source is None):
        problems.append(("weights_via", f"{meta.get('weights_via')!r}: \"dataset\" (make publish) or \"model\" "
                                        "(make publish TO=model), beside a weights_from"))


def _check_criteria(criteria, problems: list) -> None:
    """``criteria``: what ``make compare`` judges this kernel by (comparison.CRITERIA's keys), and
    the figures' targets ``gpu_figures`` judges itself by (``figures.TARGETS``, passed to it)."""
    from .comparison import CRITERIA
    if not isinstance(criteria, dict):
        problems.append(("criteria", "must be an object, e.g. {\"target\": 0.80, \"floor\": 0.70}"))
        return
    known = list(CRITERIA)
    if set(criteria) - set(known):
        from ...studies.figures import TARGETS  # torch: only for a kernel that sets figure targets
        known += [name for name, _ in TARGETS]
    for key in sorted(set(criteria) - set(known)):
        problems.append(("criteria", f"{key!r} is not a criterion; known: {', '.join(known)}"))
    for key in (*known[len(CRITERIA):], "target", "floor"):
        if key in criteria and not isinstance(criteria[key], (int, float)):
            problems.append(("criteria", f"{key} must be a number (the headline metric's)"))


def _check_parameters(meta: dict, notebook: Path, problems: list) -> None:
    """``parameters`` (Kaggle's values) and ``sandbox`` (the amounts ``make sandbox`` shrinks)
    name only the notebook's declared parameters, each of its default's type and within what its
    comment declares (choices, members, range, not empty: ``run.contract``)."""
    from ...run import contract
    from ..notebook_runner import parameters_source
    source = parameters_source(notebook) if notebook.exists() else None
    for field in ("parameters", "sandbox"):
        values = meta.get(field, {})
        if not isinstance(values, dict):
            problems.append((field, "must be an object of notebook parameters"))
        elif source is not None:  # what the kernel's own check would refuse on Kaggle, said here
            found = contract.problems(source, values)
            problems += [(field, f"{problem} in {notebook.name}") for problem in found]


def check_shape(shape) -> str | None:
    """Why ``shape`` (metadata's machine_shape or push's --accelerator) cannot be used."""
    if shape in RETIRED_SHAPES:
        return f"{shape!r} is {RETIRED_SHAPES[shape]}: use 'NvidiaTeslaT4'"
    if shape not in CURRENT_SHAPES:
        return (f"{shape!r} is not a current shape; use one of {sorted(CURRENT_SHAPES)} "
                "('NvidiaTeslaT4' = GPU T4 x2)")
    return None


def load(path: Path, notebooks_dir: Path = Path("notebooks")) -> dict:
    try:
        meta = json.loads(Path(path).read_text())
    except ValueError as err:
        raise MetadataError(f"{path}: not valid JSON ({err})") from None
    validate(meta, Path(path), notebooks_dir)
    return meta


def kaggle_metadata(meta: dict, owner: str, code_file: str) -> dict:
    """The kernel-metadata.json that ``kaggle kernels push`` reads (the wheels dataset
    attached when the notebook needs packages Kaggle's image lacks)."""
    kernel_id = f"{owner}/{meta['slug']}"
    datasets = list(meta.get("dataset_sources", []))
    if meta.get("wheels") and f"{owner}/kagglekit-wheels" not in datasets:
        datasets.append(f"{owner}/kagglekit-wheels")
    models = list(meta.get("model_sources", []))
    if meta.get("weights_from"):  # make publish's dataset or Model version of that kernel (tools.publish)
        trained = json.loads(Path(f"kernel-metadata/{meta['weights_from']}.json").read_text())
        if meta.get("weights_via") == "model":
            models.append(layout.model_source(trained, owner))
        else:
            datasets.append(f"{owner}/{layout.weights_slug(trained)}")
    kernel_sources = list(meta.get("kernel_sources", []))
    if meta.get("resume_from_previous_version") and kernel_id not in kernel_sources:
        kernel_sources.append(kernel_id)  # mounts this kernel's last output: the resume chain
    return {"id": kernel_id, "title": meta["title"], "code_file": code_file, "language": "python",
            "kernel_type": "notebook", "is_private": meta["is_private"], "enable_gpu": True,
            "enable_internet": meta["enable_internet"], "machine_shape": meta["machine_shape"],
            "dataset_sources": datasets,
            "competition_sources": meta.get("competition_sources", []),
            "kernel_sources": kernel_sources, "model_sources": models,
            "keywords": meta.get("keywords", []), "enable_tpu": meta.get("enable_tpu", False),
            "docker_image_pinning_type": meta.get("docker_image_pinning_type", "original")}
