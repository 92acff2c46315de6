"""Data: readers of known public layouts (Vesuvius volumes, Planetoid and Elliptic graphs,
long time-series tables, the labelled tables of tabular competitions), the built-in data sets
the notebooks use without ``data_dir``, and graph batches (neighbour sampling, whole-graph
batches, edge batches). Imports ``machine``, ``parallel`` and ``state``.
"""
