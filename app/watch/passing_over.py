"""A filtered stream that its store's writes do not concern passes over them without reading the
feed, on a shared store (Redis, a cluster), where each read would walk every event written since
its last one, for none: with a stream per client, that walk was most of what writes cost.

At its deadline (a heartbeat), a stream still filed with the feed signal has had no change since
it was filed concern it (feed_signal.py: `FeedSignal.quiet`; a sweep, a change not known, one it
may select would have taken it). So it reads nothing; it moves to the feed's end that an earlier
such turn read, once the store's listener has heard every event up to that end (the signal has
then judged them all, and none concerned the stream), and reads the end now for a later turn.
A stream moves so a heartbeat after the events, its bookmarks with it; the sweep turns it the
same way every sixth of the retention (wake_index.py), so that it never stands more than half the
retention behind, and reads nothing for it. A store whose listener does not say how far it heard (a
process's own memory, whose reads are cheap) reads as before.

A move first looks whether the feed still holds the stream's position (`_held`): the listener
hears new entries, not a feed that began again. A look that cannot be made at once keeps the
stream where it stands: a move then could pass a feed that began again unsaid, where a reader
gets every event after its position or a 410 (docs/change-feed.md). With no read slot free it
waits for one, parked, as a read does (wake_gate.py), and turns again at the slot's end, most
often finding the look another stream made meanwhile; with the store away, its next turn looks.
"""

from __future__ import annotations

import time

from app.store import FeedExpiredError, PlantStore, StoreUnavailableError
from app.watch.feed_signal import FeedSignal
from app.watch.wake_up import WakeUp


class PassingOver:
    """One filtered stream's turns at its deadline (watches.py: `EventStream`)."""

    def __init__(self, signal: FeedSignal, store: PlantStore, started: float) -> None:
        self.signal, self.store = signal, store
        #: The feed's end as a quiet turn read it, to move to at a later one, and when the
        #: stream last read or moved (time.monotonic()): that end was read after it.
        self.ahead: bytes | None = None
        self.moved_at = started
        #: The feed's version when `ahead` was read, and a time by which its read had ended.
        self.ahead_version = -1
        self.ahead_read = started

    def moved(self) -> None:
        """The stream read the feed, and stands where that read ended."""
        self.ahead = None
        self.moved_at = time.monotonic()

    def turn(self, wake_up: WakeUp, position: bytes | None) -> tuple[int, bytes | None] | None:
        """At the stream's deadline: None when it should read; else the feed's version it has
        now seen all it selects of, and the position to move to (None: stay). A look that found
        no read slot free leaves `wake_up` waiting for one."""
        signal, wake = self.signal, wake_up.wake
        if wake is None or position is None or not signal.hears:
            return None
        quiet = signal.quiet(wake, self.ahead)
        if quiet is None:
            return None
        version, covered = quiet
        to = self.ahead if covered else None
        if to is not None and to != position:
            held = self._held(position, wake_up)
            if held is False:
                self.ahead = None  # the feed lost events up to it: a read meets the 410
                raise FeedExpiredError
            if held is None:
                # Not known (no read slot free, the store away): it stays, `ahead` kept, until a
                # slot's end or its next turn looks again. A move would pass a feed that began
                # again unsaid; a read would walk what it passes over, in a slot, when the slots
                # are taken.
                return version, None
        if covered:
            # It stands at `ahead` now: any end read after that end's was serves, so the one
            # another stream's heartbeat read a moment ago does too (feed_ends.py), where the
            # time of this turn would have each moving stream read the end itself.
            self.moved_at = self.ahead_read
            if version == self.ahead_version:  # no change since: no later end to move to
                self.ahead = None
                return version, to
        # Read after the stream's last read and move: each of the feed's streams (a cluster's
        # groups) in it is at or past the stream's own position.
        end = signal.ends.kept(self.moved_at)
        gate = signal.gate
        if end is None and gate.enter(None):  # a store call in a read slot, as reads are; none free: later
            try:
                end = signal.ends.read(self.store.events_now)
            except StoreUnavailableError:
                self.ahead = None
            finally:
                gate.leave()
        if end is not None:
            self.ahead, self.ahead_read = end
            self.ahead_version = version
        return version, to

    def _held(self, position: bytes, wake_up: WakeUp) -> bool | None:
        """Whether the feed still holds the history up to `position`, as a look begun after `ahead`
        was read found (None: not known). The listener hears new entries, not a feed that began
        again: one removed by a write made with the feed off, or by a FLUSHALL, whose writes it
        never heard; so the end read after that stands in another history, and a move there
        from `position` would pass over them unsaid, where a read from it is the 410."""
        signal = self.signal
        if signal.ends.held(position, self.ahead_read):
            return True
        if not signal.gate.enter(None):
            wake_up.awaits_slot = True
            return None
        try:
            return signal.ends.look(position, lambda: self.store.events(position, 0))
        except StoreUnavailableError:
            return None
        finally:
            signal.gate.leave()
