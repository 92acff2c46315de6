"""``make submit`` and ``make score``: a finished version's submission, checked, then sent; and
the submissions of a kernel with their public scores, read back.

A code competition (``code_competition: true``, Vesuvius) scores a kernel version: Kaggle
reruns it on the hidden test set, so the version must not have trained (the rerun would train
again), unless it plans to: a version whose metrics.json carries a ``rerun_plan`` (test-time
training, ``run.rerunplan``) is accepted when the plan fits the rerun's limit and refused,
naming the unit past it, when it does not. A file competition (Store Sales) scores the file:
it is downloaded from the version's output, checked, and uploaded. Either way the version must
be COMPLETE and its file valid: a zip of masks against the test ids its metrics.json lists; a
CSV against the competition's ``sample_submission.csv`` when ``make data`` fetched it, else the
format its metrics.json records. Descriptions start with ``<slug> v<N>:``, which is how
``make score`` finds them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ...submit import rerunplan
from . import kaggle_cli
from .commands import kernel_of


def _competition(name: str, meta: dict) -> str | None:
    competitions = meta.get("competition_sources") or []
    if not competitions:
        print(f"error: kernel-metadata/{name}.json has no competition_sources: only a competition "
              "kernel can be submitted or scored", file=sys.stderr)
        return None
    return competitions[0]


def submit(name: str, message: str, output_root: str) -> int:
    """The latest version's submission to its competition, when finished and valid."""
    kernel, meta = kernel_of(name)
    competition = _competition(name, meta)
    if competition is None:
        return 2
    st = kaggle_cli.status(kernel)
    if st.state != "COMPLETE":
        print(f"refused: {kernel}'s latest version is {st.state}, not COMPLETE: submit a version "
              f"that finished (make status NB={name} WAIT=1)", file=sys.stderr)
        return 1
    version = kaggle_cli.current_version(kernel)
    if version is None:
        print(f"refused: {kernel} has no version to submit (make push NB={name})", file=sys.stderr)
        return 1
    dest = Path(output_root) / meta["slug"] / f"v{version}"
    kaggle_cli.output(kernel, dest)
    code = bool(meta.get("code_competition"))
    file, problem = submission_problem(dest, code, competition)
    if problem:
        print(f"refused: version {version} of {kernel}: {problem}", file=sys.stderr)
        return 1
    planned = json.loads((dest / "metrics.json").read_text()).get("rerun_plan") or {}
    if code and planned:
        print(rerunplan.describe(planned))
    assert file is not None, "no problem: the submission file was found"
    described = f"{meta['slug']} v{version}: {message}"
    if code:
        answer = kaggle_cli.submit_code(competition, kernel, version, file.name, described)
    else:
        answer = kaggle_cli.submit_file(competition, file, described)
    print(f"submitted {'version' if code else file.name + ' of version'} {version} of {kernel} "
          f"to {competition}: {answer}\n  make score NB={name} shows its score once Kaggle has it")
    return 0


def submission_problem(folder: Path, code: bool = True, competition: str = "") -> tuple[Path | None, str]:
    """(the submission file, why the downloaded output in ``folder`` cannot be submitted: "" when
    it can)."""
    metrics = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").exists() else {}
    recorded = metrics.get("submission", {})
    file = folder / recorded.get("file", "submission.zip" if code else "submission.csv")
    if not file.exists():
        return None, f"its output has no {file.name}"
    training = sorted(label for label, did in metrics.get("chain", {}).items() if did in ("trained", "resumed"))
    planned = metrics.get("rerun_plan") or {}
    if code and planned and rerunplan.problem(planned):  # what the rerun trains and predicts: does it fit?
        return file, rerunplan.problem(planned)
    if code and training and not rerunplan.training(planned):  # trained here, and its plan trains nothing there
        return file, (f"it trained ({', '.join(training)}): Kaggle's rerun on the hidden test set would "
                      "train again. Push once more (that version finds the finished training and only "
                      "predicts), then submit it")
    try:
        _check(file, recorded, competition)
    except (ValueError, OSError) as err:
        return file, str(err)
    return file, ""


def _check(file: Path, recorded: dict, competition: str) -> None:
    """A zip of masks against the test ids; a CSV against the sample (``make data``'s copy) or the
    recorded format. Raises the checker's error."""
    if file.suffix == ".zip":
        from ...volumes.segment3d import check_submission
        ids = recorded.get("test_ids")
        if not ids:
            raise ValueError("its metrics.json does not record the test ids the zip must hold")
        check_submission(file, dict.fromkeys(ids))
        return
    from ...submit import submission
    from .data import data_root
    sample = data_root() / competition / "sample_submission.csv"
    if sample.exists():
        schema = submission.Schema.from_sample(sample)
    elif recorded.get("columns"):
        schema = submission.Schema(recorded["columns"], recorded.get("id_columns", recorded["columns"][:1]),
                                   rows=recorded.get("rows"))
    else:
        raise ValueError("its metrics.json records no submission format, and no sample_submission.csv "
                         f"is in {sample.parent}/ (make data NB=<name> fetches it)")
    submission.check(file, schema, file.name)


def score(name: str, output_root: str = "runs/kaggle") -> int:
    """This kernel's submissions to its competition, with status and public score; the scores
    per version kept in ``<output_root>/<slug>/scores.json`` (what ``make runs`` shows)."""
    kernel, meta = kernel_of(name)
    competition = _competition(name, meta)
    if competition is None:
        return 2
    rows = [r for r in kaggle_cli.submissions(competition)
            if r.get("description", "").startswith(f"{meta['slug']} v")]
    if not rows:
        print(f"{kernel}: no submission to {competition} yet (make submit NB={name})")
        return 0
    from ...machine.display import frame
    table = [{"date": r.get("date", ""), "version": r["description"].split(":")[0].split(" v")[-1],
              "status": r.get("status", "").rsplit(".", 1)[-1], "public": r.get("publicScore", ""),
              "private": r.get("privateScore", ""), "message": r["description"].split(": ", 1)[-1]}
             for r in rows]
    from ...state import atomic
    scores = {t["version"]: {k: t[k] for k in ("public", "private", "status", "date")} for t in reversed(table)}
    atomic.write_json(Path(output_root) / meta["slug"] / "scores.json", scores)  # newest kept per version
    print(f"{kernel} on {competition}:")
    print(frame(table).to_string(index=False))
    scored = [t for t in table if t["public"] not in ("", "None")]
    if scored:
        print(f"latest public score: {scored[0]['public']} (version {scored[0]['version']})")
    return 0

