# Installed by `make setup` into .venv/etc/ipython/: the notebook kernel papermill starts
# for `make run` and the tests. Its own warnings carry nothing for a reader of the
# notebook ("running over TCP without encryption" on a kernel bound to loopback); V=1
# (KAGGLEKIT_VERBOSE) keeps them.
import os

if not os.environ.get("KAGGLEKIT_VERBOSE"):
    c.IPKernelApp.log_level = "ERROR"  # noqa: F821 - `c` is the config object IPython provides
