"""Where the code runs and on what: Kaggle or not and its folders (``env``), the attached
inputs (``inputs``), the GPUs read without touching CUDA (``gpus``), the precision each card
supports (``precision``), the session's clock (``budget``), Stop-button and SIGTERM requests
(``signals``) and how results are shown in a notebook or a terminal (``display``). The bottom
part: it imports no other part of the kit.
"""
