"""Watching the change feed: a long-poll (`GET /events?wait=S`) and server-sent events
(`GET /events` with `Accept: text/event-stream`), both read from the feed with its cursors.

Each is a WSGI iterable (app/watch/parkable.py's `ParkableAnswer`) that the packaged worker parks
while nothing happens, holding no thread (app/server/worker/parking.py: `Parking.start`):
`__next__` answers `b""` for "nothing yet", `subscribe` files the worker's wake-up with the feed
signal (app/watch/feed_signal.py: `FeedSignal.subscribe`), `deadline` says when to ask again anyway.
Under another server (stock gthread, `flask run`, a host app's middleware that wraps it), the same
iterable waits in its request thread instead (`Watch._block`), for the same wake-up. How it is
woken, and its store reads' slots, are app/watch/wake_up.py's `WakeUp`.

Everything it needs is taken from the request before the view returns: it runs after Flask has
left the request's context.

A watch ends when its authority does: at its JWT's `exp` a stream ends, and a long-poll answers
what it read before then (nothing read after `exp` is sent: the client's next request, with a
fresh token, reads it from the cursor); so they do at their first step after the worker's keys
no longer verify the JWT (its key withdrawn). A static token lasts as long as the worker that read it:
removing one takes a reload (SIGHUP), whose old workers end their watches as they stop.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from app.http.cursor import EVENTS, encode_cursor
from app.store import FeedExpiredError, PlantStore, StoreUnavailableError
from app.watch.event_data import event_data
from app.watch.feed_signal import FeedSignal
from app.watch.filters import EventFilter, scan
from app.watch.initial_state import existing, existing_blocks
from app.watch.passing_over import PassingOver
from app.watch.wake_up import NoReadSlot, WakeUp

#: The reconnection delay a stream asks of its client (`retry:`), in milliseconds.
RETRY_MS = 3000
#: A stream's framing (WHATWG HTML 9.2.6) is written for parsers laxer than the standard's: a blank
#: line ends a block only after a `data:` line. httpx-sse dispatches a blank line as an event (with
#: empty data) once any `retry:` or `id:` was seen, the latter for good; so the `retry:` opener and
#: each heartbeat comment end with a single newline, and ride in the next event's block (the
#: standard applies `retry:` as soon as its line is read; comments are skipped everywhere).
OPENER = b"retry: %d\n" % RETRY_MS
HEARTBEAT = b": keep-alive\n"
#: On a stop: reconnect in a second, again without a block of its own.
STOPPING = b"retry: 1000\n"
#: The most events one read takes, for a stream.
STREAM_PAGE = 100


class Watch:
    """What a long-poll and a stream share: the feed, the position, waking and the caps."""

    streaming = False
    #: Parked, it moves at a turn without reading: the sweep turns it (wake_index.py).
    turns = False

    def __init__(
        self,
        store: PlantStore,
        signal: FeedSignal,
        position: bytes | None,
        *,
        cursor_key: bytes,
        caller: bytes,
        expires: float | None = None,
        holds: Callable[[], bool] | None = None,
        parkable: bool,
        records: Callable[[list[Any]], list[dict[str, Any]]],
        only: EventFilter | None = None,
        client_left: Callable[[], bool] | None = None,
    ) -> None:
        self.store, self.signal, self.position, self.only = store, signal, position, only
        self.cursor_key, self.caller, self.records = cursor_key, caller, records
        #: A server parks this watch while it waits (`PARKING` in the environ, app/watch/parkable.py);
        #: else it waits in its request thread (`_block`).
        self.parkable = parkable
        self.seen = signal.version
        #: The caller's authority ends then (time.time()), and by the monotonic clock.
        self.expires = expires
        #: Whether the caller's token still verifies (a JWT's: its key still published), or None.
        self.holds = holds
        self.authority_ends = math.inf if expires is None else time.monotonic() + expires - time.time()
        self.stopping = self.done = False
        self._released = False
        self._wake_up = WakeUp(signal, only, client_left)  # asked only where it blocks
        #: It answered "nothing yet" and was not subscribed since: nobody parked it.
        self._unsubscribed = False
        signal.reads.stand(position)

    def __iter__(self) -> Watch:
        return self

    def __next__(self) -> bytes:
        """The next chunk of the answer (`next_chunk`). Parkable, `b""` is "nothing yet": the
        server calls `subscribe` and parks the connection until the wake-up (the packaged
        worker's app/server/worker/loop.py: `Registry.wake`). Not parked, it waits here, in
        this thread (`_block`), until there is a chunk."""
        while True:
            if self.done:
                raise StopIteration
            if self.signal.stopping:  # the process stops (`FeedSignal.stop_watches`)
                self.stopping = True
            if not self.parkable:
                chunk = self.next_chunk(time.monotonic())
                if chunk:
                    return chunk
                self._block()
                continue
            if self._unsubscribed:
                # Asked again with no subscribe() since its "nothing yet": no server parked it (a
                # host app's middleware wrapped this iterable, so the worker saw a plain one).
                # Asking at once would read the store in a loop: it waits in this thread instead.
                self.parkable = False
                continue
            self._wake_up.read_again()
            chunk = self.next_chunk(time.monotonic())
            self._unsubscribed = not chunk
            return chunk

    def next_chunk(self, now: float) -> bytes:
        """The answer's next bytes at `now` (time.monotonic()), or `b""`: nothing yet."""
        raise NotImplementedError

    def deadline(self) -> float:
        raise NotImplementedError

    def subscribe(self, wake: Callable[[], None]) -> None:
        """File the server's `wake`, called once when this watch has something to read: with the
        feed signal for the next change that may concern it, or, when its last read found no read
        slot free, with the wake gate for a slot's end (app/watch/wake_up.py: `WakeUp.file`)."""
        self._unsubscribed = False
        # Only where the listener judges every change can a turn move it without a read.
        self._wake_up.file(wake, self.seen, self.turns and self.signal.hears)

    def stop(self) -> None:
        self.stopping = True

    def close(self) -> None:
        self._wake_up.cancel()
        if not self._released:
            self._released = True
            self.signal.release(self.caller)
            self.signal.reads.leave(self.position)

    def expired(self) -> bool:
        """The caller's authority has ended: its JWT's `exp` passed, or its signing key was
        withdrawn (the token no longer verifies)."""
        if self.expires is not None and time.time() >= self.expires:
            return True
        return self.holds is not None and not self.holds()

    def cursor(self, position: bytes) -> str:
        return encode_cursor(self.cursor_key, position, None, EVENTS)

    def read(self, limit: int) -> tuple[list[Any], bytes, bool]:
        """The feed's entries after the position, the position after the last read, and whether
        there may be more to read now; watchers at the same position share one read."""
        seen, position = self.signal.version, self.position
        self.seen = seen
        answer: tuple[list[Any], bytes, bool] = self.signal.reads.read(
            (position, limit, self.only), position, self._fetch_in_slot, seen
        )
        return answer

    def read_on(self) -> None:
        """The last read stopped short of the feed's end (a filtered read's budget of events, all
        passed over): wake at once to read on, not at the next change, which on a quiet feed would
        leave an event it selects, further on, unsent until a deadline. A version the feed never
        has makes the next `subscribe` (or `_block`) wake it at once, the thread given back first."""
        self.seen = -1

    def advance(self, end: bytes | None) -> None:
        """Stand at `end` from now on (past what was sent, or what the filter passed over)."""
        if end is not None and end != self.position:
            self.signal.reads.move(self.position, end)
            self.position = end

    def entries(self, position: bytes | None, limit: int) -> tuple[list[Any], bytes, bool, int]:
        """Up to `limit` entries after `position` that the filter selects, the position after the
        last read, whether there may be more to read now, and how many events the read passed
        over after the last entry it selected."""
        if self.only is None:
            entries, end = self.store.feed_entries(position, limit)
            return entries, end, len(entries) == limit, 0
        found, end, at_end, passed = scan(self.store, position, limit, self.only)
        return found, end, not at_end, passed

    def _fetch(self, position: bytes | None) -> Any:
        """The store call of a read (shared_reads.py calls it when no watcher made it yet)."""
        raise NotImplementedError

    def _fetch_in_slot(self, position: bytes | None) -> Any:
        """`_fetch`, in one of the wake gate's read slots when parked (`WakeUp.fetch`); NoReadSlot
        when none is free. A read shared with another watcher takes no slot: it is a few
        microseconds either way. A watch blocked in its own thread holds that thread anyway."""
        if not self.parkable:
            return self._fetch(position)
        return self._wake_up.fetch(self._fetch, position)

    def _block(self) -> None:
        """Not parked by any server (stock gthread, `flask run`, a host's middleware that wraps
        this iterable): wait in this request thread, holding it, for the wake-up or the deadline;
        a client that left meanwhile ends it."""
        self._unsubscribed = False
        if self._wake_up.block(self.seen, self.deadline()):
            self.done = True  # never False: what ended it meanwhile (a close, a stop) stands


class LongPoll(Watch):
    """The page of events after the position, as soon as there is one, or empty at `until`."""

    def __init__(self, *args: Any, wait: float, limit: int, after: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.until = time.monotonic() + wait
        self.limit, self.after = limit, after

    def deadline(self) -> float:
        return min(self.until, self.authority_ends)

    def _fetch(self, position: bytes | None) -> Any:
        entries, end, more, _ = self.entries(position, self.limit)
        return entries, end, more

    def next_chunk(self, now: float) -> bytes:
        entries: list[Any] = []
        end = None
        more = False
        expired = self.expired()
        # A failure answers the empty page from where the client stands: its next request gets
        # the 410 or the 503, with a body of its own. A store that is away may come back before
        # `until`; a position no longer kept never will, so that page leaves at once.
        gone = False
        try:
            with contextlib.suppress(StoreUnavailableError):
                if not expired:
                    entries, end, more = self.read(self.limit)
        except FeedExpiredError:
            gone = True
        except NoReadSlot:
            return b""
        if self.expired():  # read after `exp`: nothing of it is sent
            entries, end, expired = [], None, True
        # A filtered read moves past what it passed over, even when it found nothing.
        self.advance(end)
        if not entries and now < self.until and not self.stopping and not expired and not gone:
            if more:
                self.read_on()
            return b""
        self.done = True
        page = {
            "events": self.records([entry.event for entry in entries]),
            "next": self.after if self.position is None else self.cursor(self.position),
        }
        return json.dumps(page, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class EventStream(Watch):
    """Server-sent events (WHATWG HTML §9.2): each event with its cursor as `id`, heartbeats, and
    an end after `stream_max` seconds, or at once (with `retry:`) when the server stops."""

    streaming = True

    def __init__(
        self,
        *args: Any,
        heartbeat: float,
        stream_max: float,
        bookmarks: bool = False,
        snapshot: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        #: The snapshot's pages still to send (initial_state.py), then None.
        self.listing: Iterator[list[Any]] | None = existing(self.store, self.only) if snapshot else None
        now = time.monotonic()
        self.heartbeat = heartbeat
        #: Each heartbeat is a bookmark (`event: bookmark`, its `id:` the position), not a comment.
        self.bookmarks = bookmarks
        #: Events the stream passed over since it last sent its client a position (an event's or
        #: a bookmark's id). Heartbeats alone would let a client that reconnects from its last id
        #: meet a 410 when more than the feed keeps was written between two of them (or between
        #: two selected events, which put the heartbeat off): past a quarter of the retention a
        #: bookmark goes at once. A watch is read at least every half retention (wake_index.py's
        #: sweep; a stream the sweep turns sends a bookmark as it moves, every sixth), so the
        #: client's position always stays inside the window.
        self.passed = 0
        self.passed_most = max(1, self.store.events_retain // 4)
        self.next_beat = now + heartbeat
        self.ends = now + stream_max
        self.started = False
        #: The feed's version this stream has read all of (-1: not known): a chunk asked for at that
        #: version, a heartbeat's or the one after a chunk, reads nothing.
        self.current = -1
        self.passing = None if self.only is None else PassingOver(self.signal, self.store, now)
        self.turns = self.passing is not None

    def deadline(self) -> float:
        return min(self.next_beat, self.ends, self.authority_ends)

    def next_chunk(self, now: float) -> bytes:
        if not self.started:
            self.started = True
            return OPENER + (self._existing(now) if self.listing is not None else self._events(now))
        if self.stopping:
            self.done = True
            return STOPPING
        if now >= self.ends or self.expired():
            self.done = True
            return b""
        if self.listing is not None:
            return self._existing(now)
        chunk = b""
        # A stream that passes over the feed moves to an end it read once no change came since.
        ahead = self.passing is not None and self.passing.ahead is not None
        if self.signal.version != self.current or ahead:
            standing = self.position
            if not self._passes_over():
                chunk = self._events(now) if self.signal.version != self.current else b""
            elif self.position != standing and now < self.next_beat and self.bookmarks:
                # Moved by the sweep's turn, between heartbeats: the client learns its position
                # as a read's bookmark past what it passed over would tell it (`passed_most`).
                chunk = self.bookmark()
        if chunk:
            return chunk
        if now >= self.next_beat:
            self.next_beat = now + self.heartbeat
            if self.bookmarks and self.position is not None:
                return self.bookmark()
            return HEARTBEAT
        return b""

    def _existing(self, now: float) -> bytes:
        """The snapshot's next page of plants, or, after its last, the `initial_end` bookmark."""
        assert self.listing is not None
        try:
            for plants in self.listing:
                if plants:
                    return existing_blocks(plants)
        except StoreUnavailableError:
            self.done = True
            return OPENER
        self.listing = None
        self.next_beat = now + self.heartbeat
        return self.bookmark(initial_end=True)

    def bookmark(self, **more: Any) -> bytes:
        """A bookmark: the stream's position, to reconnect from (`Last-Event-ID`) without loss."""
        assert self.position is not None
        self.passed = 0
        cursor = self.cursor(self.position)
        data = json.dumps({"next": cursor, **more}, separators=(",", ":"))
        return f"id: {cursor}\nevent: bookmark\ndata: {data}\n\n".encode()

    def _passes_over(self) -> bool:
        """A filtered stream's turn at its deadline, still filed with the signal: no read, and
        a move past what it passed over once that is known (passing_over.py)."""
        if self.passing is None:
            return False
        try:
            turn = self.passing.turn(self._wake_up, self.position)
        except FeedExpiredError:  # the feed lost what it stands on: its read sends `gone`
            self.current = -1
            return False
        if turn is None:
            return False
        self.seen = self.current = turn[0]
        self.advance(turn[1])
        return True

    def _events(self, now: float) -> bytes:
        seen, position = self.signal.version, self.position
        self.seen = seen
        try:
            # Streams at the same position send the same bytes: made once per change.
            frames, end, full, passed = self.signal.reads.read(
                ("stream", position, self.only), position, self._fetch_in_slot, seen
            )
        except NoReadSlot:
            return b""
        except FeedExpiredError:
            self.done = True
            gone = {"error": 410, "message": "Events after this position are no longer kept."}
            return b"event: gone\ndata: %s\n\n" % json.dumps(gone).encode()
        except StoreUnavailableError:
            self.done = True
            return OPENER
        if self.expired():  # read after `exp`: the stream ends without it
            self.done = True
            return b""
        self.current = -1 if full else seen
        if full:
            self.read_on()
        # A filtered stream moves past what its filter passed over too, sending nothing.
        self.advance(end)
        if self.passing is not None:
            self.passing.moved()
        if frames:
            self.next_beat = now + self.heartbeat
        if self.bookmarks:
            self.passed = passed if frames else self.passed + passed
            if self.passed >= self.passed_most and self.position is not None:
                frames += self.bookmark()
        return frames

    def _fetch(self, position: bytes | None) -> tuple[bytes, bytes | None, bool, int]:
        """The events after `position` as server-sent events, the position after what was read,
        whether there may be more, and how many it passed over after the last one it sent."""
        entries, end, full, passed = self.entries(position, STREAM_PAGE)
        if not entries:
            return b"", end, full, passed
        records = self.records([entry.event for entry in entries])
        frames = []
        for entry, record in zip(entries, records, strict=True):
            data = event_data(record)
            frames.append(f"id: {self.cursor(entry.position)}\nevent: {record['type']}\ndata: {data}\n\n")
        return "".join(frames).encode(), end, full, passed
