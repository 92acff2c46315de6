"""Volumes: 3-D segmentation of CT scans in the Vesuvius Challenge layout (``folder``,
``kk.volumes``; TIFF stacks read by ``tiff``, decoded once into ``volumecache``), the patches, Dice
loss and sliding windows (``segment3d``), 3-D augmentation (``augment3d``), the leaderboard's surface
score (``surfacescore``) and its post-processing (``postprocess3d``). A room: it imports the floors,
never another room.
"""
from typing import TYPE_CHECKING

from ..readers.face import forward

if TYPE_CHECKING:  # the reader's names, as __getattr__ hands them on
    from .folder import *  # noqa: F403

__getattr__ = forward(__name__, "folder")
