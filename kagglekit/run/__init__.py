"""The run and its report: ``kk.start`` and the ``Run`` context every fit, launch and search
takes (``context``), notebook parameters (``params``), scores by scikit-learn's definitions
(``metrics``), per-epoch evaluators (``evaluate``), plots, submissions checked before they are
sent (``submission``), cross-validation folds as resumable units (``folds``) and blends of
out-of-fold predictions (``blend``).
"""
