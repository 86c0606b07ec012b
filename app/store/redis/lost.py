"""A write whose reply was lost: its connection broke after the script was sent whole,
so it may have run. Sent again, its second run would judge the state its first run made (a PUT
with If-Match would answer 412, a DELETE 404, though they landed), so it is never resent blind
(`Unanswered`, app/compat/redis.py). The write's event in its group's feed tells what it did:

- its event is there (the newest with the write's origin, the request's id and a mark of the
  write's own (origins.py), and its plant's id):
  the write answers what that event records;
- it is not: once the write's deadline has passed (deadline.py: Redis refuses the first run
  wherever it is still queued), the feed is read again; still nothing, so the first run wrote
  nothing and never will, and the script runs once more with a deadline of its own;
- the feed cannot tell (it is off, the write has no origin, or too many events followed): 503,
  once the deadline has passed, so that the write has landed by the 503 or never will.

All of it ends within twice the write's window of its start: the steps after the lost reply (the
reads of the feed and the second run, its connect and its slot's moves included) share one end,
the write's deadline plus one more window, and each gets only what is left of it (a read that
cannot end in time times out: 503). A second run gets a deadline of what is left, so that its 503
too leaves once it has landed or never will.

A create is learnt alike: sent again blind, its second run would find the plant its first run
stored and answer "identical", or, had another client deleted the plant meanwhile, store it a
second time (a deleted plant back, and two created events for one request).
"""

from __future__ import annotations

import time
from typing import Any

from app.compat.redis import Unanswered
from app.store.base import StoreUnavailableError
from app.store.redis.client import ScriptRunner
from app.store.redis.deadline import Deadline
from app.store.redis.groups import Groups
from app.store.redis.lua import SettleArgs

#: The most events the feed is read back for a write's own: about a second of a busy group.
_MOST_EVENTS = 1000
#: How far before its deadline's window a write's event may be dated: Redis's clock may be behind.
_SKEW_MS = 1000
#: The feed's kinds of event (`record` in scripts/library.lua), as each script answers them.
_ANSWERS: dict[str, dict[int, Any]] = {"CREATE": {0: 0}, "CHANGE": {0: [0], 1: [1]}, "DELETE": {2: 1}}


class LostReplies:
    """Learns what a create, a change or a delete did after its reply was lost, and answers that."""

    def __init__(self, run: ScriptRunner, groups: Groups, window_s: float, *, confirmed: bool) -> None:
        self._run = run
        self._confirmed = confirmed
        self._groups = groups
        self._window_s = window_s
        self._most = min(_MOST_EVENTS, int(groups.retain_arg) - 1)

    def write(
        self, name: str, keys: tuple, args: tuple, deadline: Deadline, plant_id: int, origin: str
    ) -> Any:
        """The answer of the write script `name` (CREATE, CHANGE or DELETE) whose keys and arguments
        are `keys` and `args` (the deadline fourth); raises the store's errors."""
        try:
            return self._run(name, keys, args, write=True, deadline=deadline, learn=True)
        except Unanswered:
            pass
        # The end of every later step: the 503 leaves by then at the latest.
        end = deadline.settled_at + self._window_s
        settle = SettleArgs(
            self._groups.tags[self._groups.of(plant_id)],
            self._groups.cluster_arg,
            origin,
            plant_id,
            max(0, deadline.ms - int(self._window_s * 1000) - _SKEW_MS),
            self._most,
        )
        try:
            found = self._found(name, keys, settle, end)
            if found is None:
                deadline.wait_until_settled()
                found = self._found(name, keys, settle, end)
        except StoreUnavailableError:
            deadline.wait_until_settled()  # a 503 only once the write has landed or never will
            raise
        if found is not None and self._confirmed:
            # It landed, and whether a replica has it was in the lost reply (its WAIT).
            raise self._unknown(keys, "whether a replica has it")
        if found is not None:
            return found
        # Settled, and nothing written: the write runs once more, as if new, in what is left.
        left = end - time.monotonic()
        if left <= 0:
            raise StoreUnavailableError(
                "timeout",
                "the connection was lost after the write was sent; it did not run, and no time was"
                " left to run it again (Redis: Unanswered)",
                self._run.serving(keys[0]),
            )
        again = Deadline.after(left)
        try:
            args = (*args[:3], again.ms, *args[4:])
            return self._run(name, keys, args, write=True, deadline=again, learn=True, until=end)
        except Unanswered:
            again.wait_until_settled()
            raise self._unknown(keys) from None

    def _found(self, name: str, keys: tuple, settle: SettleArgs, end: float) -> Any:
        """The write's answer by its event in the feed (keys[2]), read by `end` (time.monotonic());
        None when it has none; raises StoreUnavailableError when the feed cannot tell."""
        if not settle.origin or self._most < 1:
            raise self._unknown(keys)
        try:
            event = self._run("SETTLE", (keys[2],), settle, until=end)
        except StoreUnavailableError as exc:
            if exc.reason != "other":
                raise
            raise self._unknown(keys) from None
        if not event:
            return None
        kind, value = int(event[0]), event[1]
        answers = _ANSWERS[name]
        if kind not in answers:
            raise self._unknown(keys)
        answer = answers[kind]
        return [*answer, value] if isinstance(answer, list) else answer

    def _unknown(self, keys: tuple, what: str = "whether it ran") -> StoreUnavailableError:
        return StoreUnavailableError(
            "connection",
            f"the connection was lost after the write was sent, and the store cannot tell {what}"
            " (Redis: Unanswered)",
            self._run.serving(keys[0]),
        )
