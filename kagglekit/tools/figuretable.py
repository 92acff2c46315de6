"""``make results NB=gpu_figures``: a measured figures table into benchmarks/history/gpu-figures.md, dated.

Reads what ``make output`` fetched (``runs/kaggle/<slug>/v<N>/metrics.json`` and ``kaggle.json``)
or a local run's folder (``make gpu-check``), and appends each version's judged figures as one
dated Markdown table naming the device, driver, torch, CUDA and where it came from (the kernel
and its version). A marker line per version makes a second append of the same version change
nothing; versions already in the file are skipped, the rest appended in order.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..state import atomic
from .runfolders import fetched_versions

RESULTS = Path("benchmarks/history/gpu-figures.md")  # the diary: RESULTS.md quotes what holds


class FiguresError(ValueError):
    """Nothing to append: no fetched version, or a metrics.json without figures."""


def marker(source: str) -> str:
    return f"<!-- kagglekit figures: {source} -->"


def _cell(value) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def block(metrics: dict, source: str) -> str:
    """The Markdown of one run's figures: heading, provenance, one row per figure."""
    figures, machine = metrics.get("figures"), metrics.get("provenance", {})
    if not figures:
        raise FiguresError(f"{source}: its metrics.json has no figures (did gpu_figures finish? "
                           "make status / make logs show where it stopped)")
    lines = [marker(source), f"### gpu_figures on {machine.get('device', '?')}, {machine.get('date', '?')}", "",
             f"From {source}. Driver {machine.get('driver')}, torch {machine.get('torch')}, "
             f"CUDA {machine.get('cuda')}.", "",
             "| workload | figure | value | target | verdict |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {f['workload']} | {f['figure']} | {_cell(f['value'])} | {_cell(f['target'])} | {f['verdict']} |"
              for f in figures]
    return "\n".join(["", *lines, ""])


def append(results: Path, metrics: dict, source: str) -> bool:
    """Append ``metrics``' figures unless ``source`` is already in ``results``; True if appended."""
    text = results.read_text() if results.exists() else ""
    if marker(source) in text:
        return False
    atomic.write_bytes(results, (text + block(metrics, source)).encode())
    return True


def append_fetched(root: Path, slug: str, results: Path = RESULTS) -> list[str]:
    """Every fetched version of ``slug`` not yet in ``results``; the lines said about each."""
    versions = fetched_versions(root / slug)
    if not versions:
        raise FiguresError(f"no fetched version of {slug} under {root}/{slug}/: run "
                           f"`make output NB=gpu_figures` after the kernel finished")
    said = []
    for folder in versions:
        status = json.loads((folder / "kaggle.json").read_text()).get("status", "?") \
            if (folder / "kaggle.json").exists() else "?"
        source = f"Kaggle kernel {slug} version {folder.name[1:]} ({status})"
        metrics = json.loads((folder / "metrics.json").read_text())
        done = append(results, metrics, source)
        said.append(f"{results}: {'appended' if done else 'already there, unchanged:'} {source}")
    return said


def append_local(folder: Path, results: Path = RESULTS) -> str:
    """A local run's figures (``make gpu-check``), keyed by its folder."""
    metrics = json.loads((folder / "metrics.json").read_text())
    source = f"local run {folder.resolve()} of {metrics.get('provenance', {}).get('date', '?')}"
    done = append(results, metrics, source)
    return f"{results}: {'appended' if done else 'already there, unchanged:'} {source}"
