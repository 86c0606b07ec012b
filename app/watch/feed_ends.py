"""The feed's end, read for the filtered streams that pass over the feed (passing_over.py), and
kept a moment for the others."""

from __future__ import annotations

import time
from collections.abc import Callable

#: How long the feed's end read for one stream serves the others (`FeedEnds.read`).
END_KEPT_SECONDS = 1.0


class FeedEnds:
    """The feed's end as last read for a stream passing over the feed, and when."""

    def __init__(self) -> None:
        self._end: tuple[float, bytes] | None = None

    def read(self, since: float, now: Callable[[], bytes]) -> bytes:
        """The feed's end (`now()`) as read after `since` (time.monotonic()): the one read for
        another stream up to END_KEPT_SECONDS ago if it was read after `since`, so that streams
        whose heartbeats fall together read it about once a second, not once each."""
        kept = self._end
        started = time.monotonic()
        if kept is not None and kept[0] >= since and started - kept[0] < END_KEPT_SECONDS:
            return kept[1]
        end = now()
        self._end = (started, end)
        return end
