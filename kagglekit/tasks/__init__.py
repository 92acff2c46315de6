"""The training functions the pipeline notebooks hand to ``launch``.

Each runs on every rank: it builds its model and loaders inside the launched
process (so CUDA is first touched there), trains through ``fit``, and returns
plain data from rank 0 for the notebook to report.
"""
