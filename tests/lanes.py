"""The sandbox's kernels in two lanes (`make test`'s ``--dist loadgroup``): each lane on one xdist
worker of its own from the start, the third worker running the other tests, and every worker the
rest once its lane ends. Three chains of emulated T4 x2 kernels side by side on two cores cost each
other CPU time; two lanes keep at most two.

xdist's own loadgroup reads ``xdist_group`` marks through the tests' node ids, which pytest 9.2
no longer lets it rename (pytest-xdist issue #1386: the marks are silently ignored). The lanes are
therefore found from the node ids here, by xdist's own LoadScopeScheduling (``scheduler``)."""
from __future__ import annotations

import re

# Seconds each sandbox test took in a `make test` (2026-11-29, run 61 in benchmarks/RESULTS.md): what
# splits them into two even lanes. A test not listed counts as the median.
SECONDS = {"text_classification": 252, "segmentation_3d": 227, "audio_classification": 181,
           "gnn_node_classification": 149, "timeseries_forecast": 126, "tabular": 105, "timeseries_served": 103,
           "readme": 90, "image_classification": 76, "text_generation": 71, "sequence_models": 50, "blend": 51,
           "gpu_figures": 46, "gpu_utilization": 18}
LANES = 2
KERNEL_TEST = re.compile(r"test_sandbox\.py::test_the_pushed_notebook_runs_in_kaggles_image\w*\[(\w+)\]$")
README_TEST = "test_makefile.py::test_the_readmes_commands_as_typed_from_a_clean_checkout"


def sandbox_name(nodeid: str) -> str | None:
    """The sandbox test's name among SECONDS (its kernel, or "readme"); None for any other test."""
    found = KERNEL_TEST.search(nodeid)
    return found.group(1) if found else "readme" if nodeid.endswith(README_TEST) else None


def lanes(names) -> dict[str, int]:
    """Each name's lane: the lane with the fewest seconds so far, the longest first."""
    median = sorted(SECONDS.values())[len(SECONDS) // 2]
    loads, lane_of = [0.0] * LANES, {}
    for name in sorted(set(names) | set(SECONDS), key=lambda n: (-SECONDS.get(n, median), n)):
        lane = loads.index(min(loads))
        loads[lane] += SECONDS.get(name, median)
        lane_of[name] = lane
    return lane_of


def scheduler(config, log):
    """xdist's LoadScopeScheduling with a scope per lane and one per other test."""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        lane_of: dict[str, int] = {}

        def _split_scope(self, nodeid: str) -> str:
            name = sandbox_name(nodeid)
            if name is None:
                return nodeid
            if name not in self.lane_of:  # every sandbox test of the collection is known by now
                self.lane_of.update(lanes(filter(None, map(sandbox_name, self.collection or [nodeid]))))
            return f"sandbox-lane{self.lane_of[name]}"
    return LaneScheduling(config, log)
