"""The tooling wing: what runs on a developer's machine, never inside a notebook.

- ``cli``: ``python -m kagglekit.tools.cli`` behind every ``make`` target.
- ``notebook_runner`` / ``runfolders``: local papermill runs, one folder per configuration.
- ``publish``: metadata, the build, the kaggle CLI, pulling edits back, local vs Kaggle.

The runtime (everything in ``kagglekit`` outside this folder) never imports it, so a
notebook on Kaggle loads none of it.
"""
