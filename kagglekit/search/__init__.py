"""Searches: Optuna studies that survive Kaggle sessions and use every GPU (``tune``), trials
sized to the time a search has (``sizing``), a finished search's report (``studyreport``), their
storages and locks (``studystore``), and the gradient-boosting helpers a search prunes
(``boosting``: XGBoost and LightGBM devices and pruning callbacks).
"""
