"""The run: ``kk.start`` and the ``Run`` context every fit, launch and search takes
(``context``), its report, metrics.json and notes (``report``), its scratch (``scratch``), units
of work, one key for a cache entry, a checkpoint folder and a study (``unit``), notebook
parameters and their contracts (``params``, ``contract``, ``paths``), plots, cross-validation
folds as resumable units (``splitters``, ``folds``, ``foldresults``, ``oofio``), units in turn
within the session's time (``turns``), units shared out over the GPUs' processes
(``workpool``) and many models on the same folds (``zoo``).
"""
