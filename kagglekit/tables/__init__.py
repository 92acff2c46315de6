"""Tables and time series: labelled tables (``folder``, ``kk.tables``), the tabular competition
layout with its sample submission (``competition``) and a Playground stand-in (``playground``), long
time-series tables and their windows (``timeseries``, ``windows``), the gradient-boosted trees
(``gbdt``) and the MLP the small notebooks train (``models``). A room: it imports the floors, never
another room.
"""
from typing import TYPE_CHECKING

from ..readers.face import forward

if TYPE_CHECKING:  # the reader's names, as __getattr__ hands them on
    from .folder import *  # noqa: F403

__getattr__ = forward(__name__, "folder")
