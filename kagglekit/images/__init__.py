"""Images: competitions of image files (a folder per class, or a table of ids with labels in one
column, in 0/1 columns or as tags: ``folder``, ``kk.images``), a stand-in of real digit scans in each
layout (``imagesets``), batch augmentation and test-time flips on the GPU (``augment2d``, which the
audio notebook borrows for its spectrograms) and pretrained timm backbones attached by
``model_dir`` (``backbones``). A room: it imports the floors, never another room.
"""
from typing import TYPE_CHECKING

from ..readers.face import forward

if TYPE_CHECKING:  # the reader's names, as __getattr__ hands them on
    from .folder import *  # noqa: F403

__getattr__ = forward(__name__, "folder")
