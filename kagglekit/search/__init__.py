"""Searches: Optuna studies that survive Kaggle sessions and use every GPU (``tune``), their
storages and locks (``studystore``), and the gradient-boosting helpers a search prunes
(``boosting``: XGBoost and LightGBM devices and pruning callbacks).
"""
