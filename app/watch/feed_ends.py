"""The feed's end, read for the filtered streams that pass over the feed (passing_over.py), and
kept a moment for the others."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.store import FeedExpiredError

#: How long the feed's end read for one stream serves the others (`FeedEnds.read`).
END_KEPT_SECONDS = 1.0


class FeedEnds:
    """The feed's end as last read for a stream passing over the feed: when its read began,
    when it had ended, and the end."""

    def __init__(self) -> None:
        self._end: tuple[float, float, bytes] | None = None
        #: The last position found still held (`look`), and when that look began.
        self._held: tuple[bytes, float] | None = None

    def kept(self, since: float) -> tuple[bytes, float] | None:
        """The end read for another stream up to END_KEPT_SECONDS ago, if its read began after
        `since` (time.monotonic()), and a time by which that read had ended; else None. So
        streams whose heartbeats fall together read the end about once a second, not once each,
        and a kept end takes no read slot. An end whose read began after another's had ended is
        at or past that other in each of the feed's streams (a cluster's groups)."""
        kept = self._end
        if kept is not None and kept[0] >= since and time.monotonic() - kept[0] < END_KEPT_SECONDS:
            return kept[2], kept[1]
        return None

    def read(self, now: Callable[[], bytes]) -> tuple[bytes, float]:
        """The feed's end (`now()`), read now and kept for the others, and when its read ended."""
        started = time.monotonic()
        end = now()
        ended = time.monotonic()
        self._end = (started, ended, end)
        return end, ended

    def held(self, position: bytes, since: float) -> bool:
        """Whether a look begun after `since` (time.monotonic()) found `position` still held:
        streams that move together stand at the same position, and share one look."""
        held = self._held
        return held is not None and held[0] == position and held[1] >= since

    def look(self, position: bytes, read: Callable[[], object]) -> bool:
        """Whether the feed still holds `position`: `read()` (a read of no event from it) raises
        FeedExpiredError when it does not, as a read would."""
        started = time.monotonic()
        try:
            read()
        except FeedExpiredError:
            return False
        self._held = (position, started)
        return True
