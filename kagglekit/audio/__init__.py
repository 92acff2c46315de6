"""Audio: animal-sound competitions in BirdCLEF's layout (``folder``, ``kk.audio``: clips,
soundscapes, secondary labels), a stand-in of synthetic calls in that layout (``audiosynth``), mel
spectrograms on the GPU (``mel``) and the pretrained BirdNET v2.4 embedder (``birdnet``). A room:
it imports the floors, never another room.
"""
from typing import TYPE_CHECKING

from ..readers.face import forward

if TYPE_CHECKING:  # the reader's names, as __getattr__ hands them on
    from .folder import *  # noqa: F403

__getattr__ = forward(__name__, "folder")
