"""GPU studies: the launch-bound cycle study of ``gpu_utilization`` (``cycles``) and the
write-ups' figures ``gpu_figures`` measures (``figures``: AMP, CUDA graphs, loaders, both GPUs).
A room: it imports the floors, never another room.
"""
