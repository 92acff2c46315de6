"""What a pipeline needs beyond the generic machinery: 3-D segmentation parts (patches,
Dice, sliding windows, the submission zip: ``segment3d``), reference models (``models``) and
the launch-bound cycle study of the GPU-utilisation notebook (``cycles``). The top part.
"""
