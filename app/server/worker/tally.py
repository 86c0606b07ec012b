"""Counted log lines: a flood of one event (clients displaced, `accept()` failing, attackers'
connections answered 408) is one line per `LOG_PERIOD` with its count, not a line each."""

from __future__ import annotations

import threading
from typing import Any

#: One line per period at most, for each kind of event.
LOG_PERIOD = 5.0


class Tally:
    """Events counted between log lines, one line per `LOG_PERIOD` at most."""

    def __init__(self) -> None:
        self._count, self._logged_at = 0, 0.0

    def add(self, count: int, now: float) -> int:
        """Count `count` more; the count to log now, or 0 while a line is not due."""
        self._count += count
        if not count or now < self._logged_at + LOG_PERIOD:
            return 0
        count, self._count, self._logged_at = self._count, 0, now
        return count


class Refusals:
    """The worker's 408s to clients that stalled or left, from any request thread: the first of a
    kind logged at once, the rest counted into the next line of that kind. A client that connects,
    sends part of a request and closes costs the worker a line otherwise, which under a flood of
    them (the half-open attack) was the largest share of its time, and of the log."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._tallies: dict[tuple[int | None, str], Tally] = {}  # a few: each `why` is a fixed sentence

    def answered(self, code: int | None, why: str, now: float) -> None:
        with self._lock:
            count = self._tallies.setdefault((code, why), Tally()).add(1, now)
        if count == 1:
            self._log.warning("Answered %s to a client that %s", code, why)
        elif count:
            self._log.warning(
                "Answered %s to %s clients, each one that %s (one such line per %ss at most)",
                code,
                count,
                why,
                LOG_PERIOD,
            )
