"""The worker's memory budget (`Budget`): the bytes it holds for its clients, all connections
together, and the connections displaced when they are past it.

`memory_budget` (GUNICORN_MEMORY_BUDGET) counts unparsed and parsed request bytes, unsent answer
bytes and a waiting answer's collected pieces (`Conn.holding()`), as each connection is handed
back to the epoll (registry.py). Past it, connections holding bytes are displaced, the least
progress first (displacement.py), until it holds again; one line is logged per `LOG_PERIOD` at
most, with the count.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from app.server.worker.displacement import to_fit

if TYPE_CHECKING:
    from app.server.worker.connection import Conn

#: The default memory budget of a worker (GUNICORN_MEMORY_BUDGET is in MiB).
MEMORY_BUDGET = 64 * 1024 * 1024
#: One line is logged per period at most, for descriptors (admission.py) and for the budget each.
LOG_PERIOD = 5.0


class Budget:
    """The bytes held, as last counted. Called with the registry's lock held."""

    def __init__(self, limit: int, log: Any) -> None:
        self.limit = limit
        self.held = 0
        self._log = log
        self._logged_at, self._displaced = 0.0, 0

    def account(self, conn: Conn) -> None:
        """Count what `conn` holds now."""
        held = conn.holding()
        self.held += held - conn.held
        conn.held = held

    def release(self, conn: Conn) -> None:
        """`conn` has closed: it holds nothing more."""
        self.held -= conn.held
        conn.held = 0

    def over(self, conns: Iterable[Conn]) -> list[Conn]:
        """The connections to close, the least progress first, until the rest fit; none while
        the bytes held fit."""
        if self.held <= self.limit:
            return []
        now = time.monotonic()
        victims = to_fit(conns, self.held, self.limit, now)
        self._displaced += len(victims)
        if victims and now >= self._logged_at + LOG_PERIOD:
            self._log.warning(
                "Over the memory budget (%s bytes held, of %s): %s connections displaced in %ss, "
                "those making the least progress",
                self.held,
                self.limit,
                self._displaced,
                LOG_PERIOD,
            )
            self._logged_at, self._displaced = now, 0
        return victims
