"""What Kaggle receives: a submission checked against the sample before it is sent
(``submission``), an inference server's ``predict`` (``serving``), the scoring rerun's time
plan against its limit (``rerunplan``), blends of out-of-fold predictions by their weights
(``blend``), other kernels' OOFs joined by id (``oofsources``), and a model exported for a
CPU-only rerun, checked and timed against torch (``export``).
"""
