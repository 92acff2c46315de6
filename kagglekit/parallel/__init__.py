"""Ranks and launch: who this process is in a run (``ranks``), forking one DDP process per GPU
from inside a notebook and supervising them (``launcher``), each rank's log file (``ranklog``),
and DataLoaders that fit the machine with a sampler that resumes mid-epoch (``loaders``).
Imports ``machine`` only.
"""
