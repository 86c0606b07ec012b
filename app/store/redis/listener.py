"""How a process hears of the other processes' writes to a Redis store's feed.

The feed is a stream per bucket group: one on a single Redis, 24 spread over a cluster's shards.
A thread per stream blocks on it (`XREAD BLOCK` after the newest entry it saw), on connections
of the listener's own whose timeout outlasts the block: one `XREAD` can name keys of one slot
only, and the groups' slots differ on purpose. Any new entry sets one flag, which `wait` reads,
and is kept as what it touched (its kind, its plant's id, its plant's tag after and before:
`take`), so that the signal wakes only the watchers it concerns; a burst of more than
`BATCH * BURST_READS` entries at once is kept as "not known" (None), which wakes every watcher,
as a failure does, and so is more than MAX_KEPT entries' touches between two `take`s (a process
with no watcher takes none, while its threads read on). A stream that cannot be read makes `wait`
raise, unless another had a new entry, and goes on making it raise until it is read again (the
feed's signal, app/watch/feed_signal.py, decides whom to wake, and its listener thread,
app/watch/feed_listener.py, how often while the store is away: a quiet `wait` would tell it the
store is back).

A stream's thread starts from its newest entry, and the listener starts with the first watcher,
after that watcher read the feed: an entry added between that read and the thread's first cursor
is behind the cursor, never heard, and the watcher would wait for the next change it is woken
for (on a quiet feed, for good). So once every stream's thread has its first cursor, the start
is kept as a change not known, which wakes every watcher once: their read includes whatever came
before the cursors, and what comes after is heard.

Each `take` also keeps how far every stream had been heard then (`heard`): once the signal has
woken the watchers those entries concern, a position inside it is one whose every event the
signal has judged (app/watch/feed_signal.py: `FeedSignal.quiet`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from app.store.redis.feed import decode_position, touched_by
from app.store.redis.renewal import renew

#: How long one `XREAD` blocks, in milliseconds.
BLOCK_MS = 5000
#: After a read that found entries, a stream's thread rests this long: under a stream of writes
#: it wakes the process at most this often instead of once per write, each wake-up costing the
#: worker's core a look (its watchers', its deliverer's) and Redis two commands.
REST_SECONDS = 0.02
#: At most this many entries are read in one call and kept as what they touched.
BATCH = 256
#: How many full batches one wake-up reads on before it gives up and skips to the newest: each
#: entry costs the listener a parse, a wake-all costs every filtered watcher a read of the feed.
BURST_READS = 8
#: At most this many entries' touches are kept between two `take`s; past it, "not known": while no
#: one watches, the process takes nothing, and its streams' threads go on reading every write.
MAX_KEPT = BATCH * BURST_READS
#: What an entry touched: its kind, its plant's id, and its plant's tags after and before; and
#: the mark of the write that made it (None: none), by which a process knows its own writes.
Touch = tuple[int, int, tuple[str | None, ...], bytes | None]


class Heard:
    """The entry IDs each stream had been heard up to at one `take`, in the streams' order."""

    def __init__(self, last: list[tuple[int, int]]) -> None:
        self._last = last

    def covers(self, position: bytes) -> bool:
        """Whether every event up to `position` (a position of the feed, feed.py) was heard."""
        try:
            groups = decode_position(position, len(self._last))
        except ValueError:
            return False
        return all((ms, seq) <= heard for (ms, seq, _), heard in zip(groups, self._last, strict=True))


def _entry_id(raw: Any) -> tuple[int, int]:
    ms, _, seq = (raw.decode() if isinstance(raw, bytes) else raw).partition("-")
    return int(ms), int(seq)


class StreamsListener:
    """Blocks on each of `keys` until an entry newer than the last it saw is added to any."""

    def __init__(self, client: Any, keys: list[str], renewals: Callable[[], int] | None = None) -> None:
        """`renewals`: a single Redis's count of moves to a new primary (client.py: `renew`)."""
        self._client, self._keys, self._renewals = client, keys, renewals
        self._changed = threading.Event()
        #: A failure since the last `wait`, and whether an entry came since then.
        self._failure: Exception | None = None
        #: The streams whose last read failed, with its error: while any is, the store is still
        #: away, though its thread, blocked on a hung Redis, has not failed again yet.
        self._away: dict[str, Exception] = {}
        self._entries = False
        #: What the entries since the last `take` touched; None: not known (a burst, a failure).
        self._touched: list[Touch] | None = []
        self._lock = threading.Lock()
        self._closed = False
        self._started = False
        #: The streams whose thread has not taken its first cursor yet.
        self._starting = len(keys)
        #: Each stream's entry ID heard up to (its first cursor, then the last entry read), and
        #: all of them as the last `take` found them (None: not every stream had its cursor).
        self._last: dict[str, tuple[int, int]] = {}
        self.heard: Heard | None = None

    def wait(self, timeout: float) -> bool:
        if not self._started:
            self._started = True
            for key in self._keys:
                threading.Thread(target=self._follow, args=(key,), name=f"feed-{key}", daemon=True).start()
        changed = self._changed.wait(timeout)
        if changed:
            # Before the watchers read: a change after this sets the flag again.
            self._changed.clear()
        failure, self._failure = self._failure, None
        entries, self._entries = self._entries, False
        away = list(self._away.values())  # one step: the streams' threads change it meanwhile
        if failure is None and away:
            failure = away[0]
        if failure is not None and not entries:
            raise failure
        return changed

    def take(self) -> list[Touch] | None:
        """What the entries heard since the last call touched (None: not known), forgotten."""
        with self._lock:
            touched, self._touched = self._touched, []
            last = self._last
            self.heard = Heard([last[key] for key in self._keys]) if len(last) == len(self._keys) else None
        return touched

    def _heard(self, touched: list[Touch] | None, key: str | None = None, last: Any = None) -> None:
        """Keep what entries touched, and (`key`) that its stream was read up to entry ID `last`."""
        with self._lock:
            if key is not None:
                self._last[key] = _entry_id(last)
            if touched is None or self._touched is None or len(self._touched) + len(touched) > MAX_KEPT:
                self._touched = None
            else:
                self._touched.extend(touched)
        self._entries = True
        self._changed.set()

    def _cursor_taken(self, key: str, last: Any) -> None:
        """One stream's thread has its first cursor; after the last one's, the start is heard as
        a change not known (the module's docstring)."""
        with self._lock:
            self._last[key] = _entry_id(last)
            self._starting -= 1
            last = self._starting == 0
        if last:
            self._heard(None)

    def _follow(self, key: str) -> None:
        last = None
        failed = False
        first = True
        renewals = self._renewals() if self._renewals else 0
        while not self._closed:
            try:
                if self._renewals and self._renewals() != renewals:
                    # So does this stream (one thread's): on from `last` on the new primary.
                    renewals = self._renewals()
                    renew(self._client)
                if last is None:
                    last = self._newest(key)
                    if first:
                        first = False
                        self._cursor_taken(key, last)
                    if failed:  # back after a failure: what came meanwhile is worth a look
                        failed = False
                        self._away.pop(key, None)
                        self._heard(None, key, last)
                answer: Any = self._client.xread({key: last}, count=BATCH, block=BLOCK_MS)
                entries = _entries_of(answer)
                if entries:
                    last = self._read_on(key, entries)
                    time.sleep(REST_SECONDS)
                else:
                    mark = self._mark_past(key, last)
                    if mark is not None:  # a change not known, which a read from before meets as 410
                        last = mark
                        self._heard(None, key, last)
            except Exception as exc:  # the store is away: say so, then try again
                if self._closed:
                    break
                last, failed = None, True
                self._failure = self._away[key] = exc
                with self._lock:
                    self._touched = None
                self._changed.set()
                time.sleep(1.0)
        # `close` cut this thread's connection, which the client's retry may have opened again:
        # closed once more by each thread as it ends, the last one's closes what is left.
        self._client.close()

    def _read_on(self, key: str, entries: list[Any]) -> Any:
        """Keep what `entries` and those after them touched, reading on while a batch comes full;
        past BURST_READS batches, skip to the newest (one wake-up of everyone covers the burst).
        Returns the entry ID read up to."""
        touched: list[Touch] = []
        for _ in range(BURST_READS):
            touched += [touched_by(fields) for _, fields in entries]
            last = entries[-1][0]
            if len(entries) < BATCH:
                self._heard(touched, key, last)
                return last
            entries = _entries_of(self._client.xread({key: last}, count=BATCH))
            if not entries:
                self._heard(touched, key, last)
                return last
        # The newest first, then the wake-up: an entry added in between would be skipped unheard.
        newest = self._newest(key)
        self._heard(None, key, newest)
        return newest

    def _newest(self, key: str) -> Any:
        entries = self._client.xrevrange(key, count=1)
        newest = entries[0][0] if entries else "0-0"
        return self._mark_past(key, newest) or newest

    def _mark_past(self, key: str, last: Any) -> Any:
        """The mark a write made with the feed off left (library.lua: `record`) when it is the
        stream's newest, past `last`; else None. It is no entry, so no read hears it, and an end
        of the feed taken since stands at it: heard as the newest, a quiet stream moves on to
        that end, meeting the 410 of its position on the way (passing_over.py)."""
        try:
            info = self._client.xinfo_stream(key)
        except ResponseError:  # no such key: a stream never written has no mark
            return None
        mark = info.get("max-deleted-entry-id")
        if mark is None or mark != info.get("last-generated-id"):
            return None
        return mark if _entry_id(mark) > _entry_id(last) else None

    def close(self) -> None:
        """End the streams' threads and close the client; a `wait` under way returns at once."""
        self._closed = True
        self._client.close()
        self._changed.set()


def _entries_of(answer: Any) -> list[Any]:
    """The entries of one stream's `XREAD` answer: [[key, [(entry ID, fields), ...]]] or none."""
    return answer[0][1] if answer else []
