"""When a stream's first heartbeat comes: earlier than the interval by a fraction that differs
from one stream to the next, so that streams opened together (a crowd of clients started at once,
or reconnecting after a restart or at their `PLANTS_EVENTS_STREAM_MAX`) beat apart ever after, not
in one burst of the worker's turns that holds its request threads from every other request.

Each beat after the first comes a whole interval after the stream last sent anything, so a stream
is never quiet for longer than the interval: only the first gap is shorter.
"""

from __future__ import annotations

import itertools
import math
import os

#: The first heartbeat comes between (1 - SPREAD) and 1 interval after the stream opens. Not
#: earlier: a heartbeat that soon would tell a client nothing its stream's opening did not.
SPREAD = 0.5
#: The golden ratio's fractional part: its successive multiples, each taken modulo 1, stand far
#: from each other however many are taken (a Weyl sequence), where random phases may fall together.
_STEP = (math.sqrt(5) - 1) / 2


class _Opened:
    """This process's streams, numbered from its pid: workers forked together (whose pids follow
    each other) take other phases than each other's, as they would from a count of their own."""

    def __init__(self) -> None:
        self.count = itertools.count(os.getpid())

    def restart(self) -> None:
        self.count = itertools.count(os.getpid())


#: next() on it is atomic under the GIL.
_opened = _Opened()
os.register_at_fork(after_in_child=_opened.restart)


def first_heartbeat(interval: float) -> float:
    """Seconds from a stream's opening to its first heartbeat: in ((1 - SPREAD) * interval,
    interval], each stream's at another point of that range than the streams opened just before."""
    return interval * (1 - SPREAD * ((next(_opened.count) * _STEP) % 1.0))
