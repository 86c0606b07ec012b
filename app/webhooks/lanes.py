"""Fair delivery: endpoints that have been slow share a bounded lane of the deliverer's threads,
and the others keep a lane of their own (docs/webhooks.md, "Fair delivery").

Each attempt holds a thread until the receiver answers or the timeout ends it, so receivers that
answer just under the timeout could otherwise hold every thread, and an honest endpoint's event
would wait a round of timeouts. Here:

- An attempt is **slow** when it takes `slow_s` or more (a quarter of the timeout, at most
  SLOW_S). An endpoint whose last attempt was slow is slow until RECOVER attempts in a row are
  not; one whose attempts were not is fast; one this process has not sent to yet is unknown.
- **The fast lane**: at most FAST drains of fast endpoints. A drain whose attempt has been in
  flight for `hold_s` (a quarter of `slow_s`) stops counting there, so the next fast endpoint
  gets a thread within `hold_s` even while fast ones turn slow, 8 at a time; one whose attempt
  passes `slow_s` counts in the slow lane.
- **The slow lane**: at most SLOW drains of slow endpoints (those that turned slow in flight
  included), each for one attempt a turn (the deliverer ends a drain after a slow attempt). The
  next turn goes to the endpoint whose last turn started earliest, counting its last attempt's
  length as if it had started that much later: so each gets about the same thread time, and an
  honest endpoint that was slow once (a pause, a cold start) comes back after a short wait, not
  after a round of attempts that take a timeout each.
- **Unknown endpoints** start at once, beside the lanes: only an attempt tells which lane an
  endpoint belongs in, and a process that starts (or an endpoint just registered) should not
  make an honest endpoint wait behind the first attempts of slow ones. They may use all threads
  but FAST, which stay for the fast lane.
- **Threads**: at most THREADS drains in all, whatever the lanes say.

The per-endpoint records are pruned to the endpoints that exist, so they are bounded by
PLANTS_WEBHOOKS_MAX.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable

#: Drains at once of fast endpoints: the lane an honest endpoint always has.
FAST = 8
#: Drains at once of slow endpoints that may start: the share slow receivers are confined to.
SLOW = 8
#: Drains at once in all (threads of the deliverer's pool): FAST and SLOW, and the drains that
#: turned slow in flight and are still waiting for their receiver (each ends at the timeout).
THREADS = 64
#: The longest an attempt may take (seconds) and not be slow, whatever the timeout.
SLOW_S = 1.0
#: The share of the timeout an attempt may take before its endpoint is slow (when below SLOW_S).
SLOW_SHARE = 0.25
#: The share of `slow_s` an attempt in flight holds its place in the fast lane for.
HOLD_SHARE = 0.25
#: Attempts in a row under `slow_s` that bring a slow endpoint back to the fast lane.
RECOVER = 3


class Lanes:
    """Which endpoint may start draining now, and in what order (see the module's docstring).
    The coordinator asks (`order`, `admits`, `started`); drains report their attempts (`begin`,
    `end`)."""

    def __init__(self, timeout: float) -> None:
        self.slow_s = min(SLOW_S, timeout * SLOW_SHARE)
        #: How long an attempt in flight holds its place in the fast lane.
        self.hold_s = self.slow_s * HOLD_SHARE
        self._lock = threading.Lock()
        #: Attempts under `slow_s` since the endpoint's last slow one, up to RECOVER; absent: none
        #: sent by this process yet.
        self._fast_runs: dict[str, int] = {}
        #: When each endpoint's attempt in flight began (monotonic).
        self._in_flight: dict[str, float] = {}
        #: When each endpoint's last drain started (monotonic): the slow lane's turns.
        self._turns: dict[str, float] = {}
        #: How long each endpoint's last attempt took (seconds).
        self._last_s: dict[str, float] = {}

    def slow(self, endpoint_id: str) -> bool:
        """Whether the endpoint has been slow (not yet RECOVER fast attempts since)."""
        return self._fast_runs.get(endpoint_id, RECOVER) < RECOVER

    def _lane(self, endpoint_id: str, now: float) -> str:
        """`fast`, `slow` (its attempt in flight included), `unknown`, or `held`: a fast one's
        attempt in flight for `hold_s`, which counts in no lane until it ends or is slow."""
        flying = now - self._in_flight.get(endpoint_id, now)
        if self.slow(endpoint_id) or flying >= self.slow_s:
            return "slow"
        if endpoint_id not in self._fast_runs:
            return "unknown"
        return "held" if flying >= self.hold_s else "fast"

    def order(self, endpoint_ids: Iterable[str]) -> list[str]:
        """The endpoints in the order they may start: the fast ones, the unknown ones, then the
        slow ones; in each, the earliest last turn first, pushed back by the length of its last
        attempt (fair queueing of thread time)."""

        def rank(endpoint_id: str) -> tuple[int, float]:
            runs = self._fast_runs.get(endpoint_id)
            group = 1 if runs is None else 0 if runs >= RECOVER else 2
            return group, self._turns.get(endpoint_id, 0.0) + self._last_s.get(endpoint_id, 0.0)

        with self._lock:
            return sorted(endpoint_ids, key=rank)

    def admits(self, endpoint_id: str, busy: Collection[str]) -> bool:
        """Whether a drain of `endpoint_id` may start beside the drains of `busy`."""
        if len(busy) >= THREADS:
            return False
        now = time.monotonic()
        with self._lock:
            lane = self._lane(endpoint_id, now)
            if lane == "unknown":
                return len(busy) < THREADS - FAST
            limit = SLOW if lane == "slow" else FAST
            return sum(1 for other in busy if self._lane(other, now) == lane) < limit

    def started(self, endpoint_id: str) -> None:
        with self._lock:
            self._turns[endpoint_id] = time.monotonic()

    def begin(self, endpoint_id: str) -> None:
        """An attempt to `endpoint_id` goes out."""
        with self._lock:
            self._in_flight[endpoint_id] = time.monotonic()

    def end(self, endpoint_id: str) -> bool:
        """The attempt ended: whether it was slow (the drain then gives its turn up)."""
        with self._lock:
            began = self._in_flight.pop(endpoint_id, None)
            took = 0.0 if began is None else time.monotonic() - began
            self._last_s[endpoint_id] = took
            slow = took >= self.slow_s
            runs = self._fast_runs.get(endpoint_id)
            if slow:
                self._fast_runs[endpoint_id] = 0
            elif runs is None:
                self._fast_runs[endpoint_id] = RECOVER  # never slow: fast
            else:
                self._fast_runs[endpoint_id] = min(RECOVER, runs + 1)
            return slow

    def keep_only(self, endpoint_ids: Collection[str]) -> None:
        """Forget the endpoints not in `endpoint_ids` (deleted)."""
        with self._lock:
            for record in (self._fast_runs, self._in_flight, self._turns, self._last_s):
                for gone in [key for key in record if key not in endpoint_ids]:
                    del record[gone]
