"""Shipping notebooks to Kaggle: metadata validation, build, the kaggle CLI, comparison.

Nothing in the training path imports this package.
"""
