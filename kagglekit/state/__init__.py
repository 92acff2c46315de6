"""Durable state: atomic writes (``atomic``), every RNG captured (``rng``), free-space checks
(``space``), what a checkpoint trains (``identity``), step-numbered checkpoints found in the
working dir and the attached inputs (``checkpoint``), and skip-if-cached results (``cache``).
Nothing here is lost when a process is killed at any moment. Imports ``machine`` and ``parallel``.
"""
