"""Class probabilities from any fitted scikit-learn classifier, so that every reference a notebook
fits on the same folds gives what its candidates give (one probability per class, or per label).

A classifier with ``predict_proba`` gives its own. An SVC without probability estimates gives
decision values, taken through a softmax: its Platt scaling would fit five more SVCs per fold for
the same ranking of classes. For two classes it gives one value, the second class's margin: as two
columns, -d/2 and d/2. Several labels per row: each label's margin through a sigmoid.
"""
from __future__ import annotations

import numpy as np
import torch


def of(fitted, x, multilabel: bool = False) -> np.ndarray:
    """(rows, classes) probabilities of ``x`` (see the module)."""
    if hasattr(fitted, "predict_proba"):
        return fitted.predict_proba(x)
    margins = torch.as_tensor(fitted.decision_function(x))
    if multilabel:
        return torch.sigmoid(margins).numpy()
    margins = torch.stack([-margins / 2, margins / 2], 1) if margins.ndim == 1 else margins
    return torch.softmax(margins, -1).numpy()
