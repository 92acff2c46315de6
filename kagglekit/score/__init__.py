"""Scoring and ensembling: what a prediction is worth and how predictions combine.

- ``metrics``: scores by scikit-learn's definitions (PR-AUC, F1 at the best threshold, MAP@k, ...),
  reduced over the ranks;
- ``evaluate``: per-epoch evaluators ``fit`` calls on the validation data;
- ``scoring``: a metric by its competition name, with its direction and its input form;
- ``hillclimb``, ``stacking``: blends of out-of-fold predictions, weighed honestly on the folds;
- ``choice``: which candidate a submission sends, and why.
"""
