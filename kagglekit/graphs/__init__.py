"""Graphs: node classification on Planetoid's citation graphs and Elliptic's transactions
(``graphsets``: the files as published) and the graph batches a GNN trains on (``graph``: neighbour
sampling, whole-graph and edge batches). A room: it imports the floors, never another room.
"""
