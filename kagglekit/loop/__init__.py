"""The fit loop and its step: ``train.fit`` (readable on one screen), the optimizer step with
accumulation, clipping and OOM back-off (``step``), its options (``fitoptions``) and state
(``fitstate``), durability inside a loop (``durable``), schedules that outlive a change of run
length (``schedule``), compile and CUDA-graph speed-ups (``accel``, ``cudagraph``), non-finite
loss guards (``guards``), progress output (``progress``) and the GPU monitor that says why the
GPU sits idle (``monitor``, ``memory``). Imports the parts below it, never ``run``.
"""
