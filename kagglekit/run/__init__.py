"""The run and its report: ``kk.start`` and the ``Run`` context every fit, launch and search
takes (``context``), notebook parameters (``params``), scores by scikit-learn's definitions
(``metrics``), per-epoch evaluators (``evaluate``), plots, submissions checked before they are
sent (``submission``), cross-validation folds as resumable units (``folds``), blends of
out-of-fold predictions (``blend``), and a tabular ensemble's parts: metrics by name
(``scoring``), units over the GPUs' processes (``workpool``), many models on the same folds
(``zoo``), hill climbing, stacking and other kernels' OOFs (``hillclimb``, ``stacking``,
``oofsources``).
"""
