"""The Redis store's change feed: a stream per bucket group (`P:events`), appended by each write's
own script (`record` in lua.py), read here a page at a time.

A position holds, for each group, the entry ID of the last event read from its stream and how
many events that stream had added up to it, as unsigned LEB128 varints. The count tells a reader
whether a trim dropped an event it has not read (the EVENTS script). On a cluster, a page reads
every group's stream in one pipeline (a round trip per node) and merges them by entry ID, so
events come roughly in time order, and in exact order within a group.

A filtered read (`select`) has the script judge the filter (events.lua: `selecting`): an entry it
passes over crosses as its entry ID alone, and only what it selects is made into an entry here,
so a filtered watch that passes over most of the feed costs the service little per event.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterator
from typing import Any

from app.store.base import (
    Event,
    EventPage,
    FeedEntry,
    FeedExpiredError,
    FeedSelection,
    Selected,
    StoreUnavailableError,
    selected_of,
)
from app.store.redis import lua
from app.store.redis.client import LazyClient
from app.store.redis.failures import FAILURES
from app.store.redis.groups import Groups
from app.store.redis.lua import EventsArgs
from app.store.redis.origins import mark_of, unmarked

#: One group's position: its last entry ID (milliseconds, sequence) and the events added up to it.
GroupPosition = tuple[int, int, int]
#: One group's read: the EVENTS script's arguments after the group's own (EventsArgs), then the
#: filter's trailing ids and tags.
_Read = tuple[Any, ...]
#: EventsArgs' filter for a read of whole entries: none.
WHOLE = ("", "*", "*", "*")


def selecting_args(selection: FeedSelection) -> tuple[str, ...]:
    """The EVENTS script's filter arguments for `selection` ('*': that part not given), then the
    ids and the tags it names (events.lua: `select_at`)."""
    ids = () if selection.ids is None else tuple(str(plant_id) for plant_id in selection.ids)
    tags = () if selection.tags is None else tuple(selection.tags)
    kinds = selection.kinds
    return (
        "1",
        "*" if kinds is None else "".join(str(kind) for kind in sorted(kinds)),
        "*" if selection.ids is None else str(len(ids)),
        "*" if selection.tags is None else str(len(tags)),
        *ids,
        *tags,
    )


def encode_position(positions: list[GroupPosition]) -> bytes:
    out = bytearray()
    for value in (v for position in positions for v in position):
        while value > 0x7F:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def decode_position(data: bytes, groups: int) -> list[GroupPosition]:
    """The positions `encode_position` wrote; ValueError for anything else."""
    values: list[int] = []
    value = shift = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            values.append(value)
            value = shift = 0
        elif shift > 63:
            raise ValueError("not a position of this store")
    if shift or len(values) != 3 * groups:
        raise ValueError("not a position of this store")
    return [(values[i], values[i + 1], values[i + 2]) for i in range(0, len(values), 3)]


def _entry_id(raw: bytes) -> tuple[int, int]:
    ms, _, seq = raw.partition(b"-")
    return int(ms), int(seq)


def _event(raw_id: bytes, value: bytes) -> Event:
    """An event from its entry ID and its one field, `<kind> <id> <encoded plant>`;
    StoreUnavailableError (`unreadable`) for an entry this service did not write so."""
    try:
        kind, plant_id, plant = value.split(b" ", 2)
        length, _, rest = plant.partition(b":")
        size = int(length)
        tag = rest[size:]
        return Event(
            int(kind),
            int(plant_id),
            rest[:size].decode(),
            tag.decode() if tag else None,
            int(raw_id[: raw_id.index(b"-")]),
        )
    except ValueError:  # (UnicodeDecodeError too) which the views would read as a cursor's
        raise StoreUnavailableError(
            "unreadable", f"the feed's entry {raw_id.decode()} is not an event as this service writes them"
        ) from None


def _one_group(answer: list[Any]) -> EventPage:
    """A page of a single Redis: its events in stream order, without the merge of a cluster's."""
    events = [_event(answer[i], answer[i + 1]) for i in range(3, len(answer), 2)]
    last = answer[-2] if events else answer[1]
    return EventPage(events, encode_position([(*_entry_id(last), int(answer[2]) + len(events))]))


def _tag_before(event: Event, recorded: bytes) -> str | None:
    """An entry's tag before its change: its `b` field (an update's to another tag: 't<tag>', or
    'n' for none), else the event's own tag."""
    if not recorded:
        return event.tag
    return recorded[1:].decode() if recorded[:1] == b"t" else None


def touched_by(fields: dict[bytes, bytes]) -> tuple[int, int, tuple[str | None, ...], bytes | None]:
    """What an entry (its fields, as `XREAD` answers them) touched: its kind, its plant's id, and
    its plant's tag after and before the change (a delete's: the deleted plant's); and the mark
    of the write that made it (origins.py), None for none."""
    event = _event(b"0-0", fields[b"e"])
    before = _tag_before(event, fields.get(b"b", b""))
    return event.kind, event.plant_id, (event.tag, before), mark_of(fields.get(b"o", b""))


def _single_entry(answer: list[Any], i: int, number: int) -> FeedEntry:
    """The entry at `answer[i]` of a single Redis's page read with origins, the `number`th event
    its stream added: its id (its entry ID), the position after it, its origin and tag before."""
    event = _event(answer[i], answer[i + 1])
    position = encode_position([(*_entry_id(answer[i]), number)])
    before = _tag_before(event, answer[i + 3])
    return FeedEntry(event, answer[i].decode(), position, unmarked(answer[i + 2]), before)


def _one_group_entries(answer: list[Any]) -> tuple[list[FeedEntry], bytes]:
    """`_one_group`'s page read with origins, each event with its id (its entry ID), the position
    after it, its origin and its tag before."""
    number = int(answer[2])
    entries = [_single_entry(answer, i, number + k) for k, i in enumerate(range(3, len(answer), 4), 1)]
    end = entries[-1].position if entries else encode_position([(*_entry_id(answer[1]), number)])
    return entries, end


def _one_group_selected(answer: list[Any], limit: int, asked: int) -> Selected:
    """A single Redis's filtered read of `asked` events (the script's answer with `selecting`):
    the first `limit` it selected, as `FeedSelection.pick` answers from whole entries."""
    number = int(answer[2])
    read = (len(answer) - 3) // 4
    candidates = (
        _single_entry(answer, i, number + k) if answer[i + 1] else None  # empty: passed over
        for k, i in enumerate(range(3, len(answer), 4), 1)
    )
    last = answer[-4] if read else answer[1]
    return selected_of(
        candidates,
        asked,
        limit,
        end=lambda: encode_position([(*_entry_id(last), number + read)]),
        more=lambda k: k < read,
    )


class _Merge:
    """A cluster's page: a k-way merge by entry ID over the groups' streams, each read in chunks
    (the first about `limit / groups`, doubling for a group that runs out), so that a page of N
    reads about N events from Redis, not N from every group. With `origins`, each event's origin
    is read too; with `read_on`, a group's stream that lost events read on after its position's
    time (GroupFeeds.entries)."""

    def __init__(
        self,
        feeds: GroupFeeds,
        starts: list[tuple[Any, Any]],
        limit: int,
        *,
        origins: bool = False,
        read_on: bool = False,
        selecting: tuple[str, ...] = WHOLE,
    ) -> None:
        self._feeds, self._limit = feeds, limit
        self._flag, self._stride = ("1", 4) if origins else ("", 2)
        self._read_on = "1" if read_on else ""
        self._selecting = selecting
        groups = len(starts)
        first = max(8, -(-(limit + 1) // groups))
        self._size = [first] * groups
        self._next = list(starts)  # where each group's next read starts
        self._buffers: list[list[tuple[int, int, int, bytes, bytes, bytes, bytes]]] = [
            [] for _ in range(groups)
        ]
        self._exhausted = [False] * groups
        self._positions: list[GroupPosition] = []
        reads = [(*start, first, self._flag, self._read_on, *selecting) for start in starts]
        for group, answer in enumerate(feeds._read(reads)):
            self._take(group, answer, first)
            self._positions.append((*_entry_id(answer[1]), int(answer[2])))

    def _take(self, group: int, answer: list[Any], asked: int) -> None:
        if answer[0] == 1:
            raise FeedExpiredError
        number, stride = int(answer[2]), self._stride
        entries = [
            (
                *_entry_id(answer[i]),
                number + k,
                answer[i],
                answer[i + 1],
                answer[i + 2] if stride == 4 else b"",
                answer[i + 3] if stride == 4 else b"",
            )
            for k, i in enumerate(range(3, len(answer), stride), 1)
        ]
        self._buffers[group] = entries[::-1]  # popped from the end
        self._exhausted[group] = len(entries) < asked
        if entries:
            self._next[group] = (entries[-1][3].decode(), entries[-1][2])

    def _refill(self, group: int) -> None:
        self._size[group] = min(2 * self._size[group], self._limit + 1)
        asked = self._size[group]
        args = (*self._next[group], asked, self._flag, self._read_on, *self._selecting)
        answer = self._feeds._read_one(group, args)
        self._take(group, answer, asked)

    def page(self, entries: list[FeedEntry] | None = None) -> EventPage:
        """The merged page; with `entries`, each event is also put there with its id (its group and
        entry ID) and the position after it."""
        heap = self._heap()
        events: list[Event] = []
        while heap and len(events) < self._limit:
            group, raw_id, value, origin, before = self._next_of(heap)
            event = _event(raw_id, value)
            events.append(event)
            if entries is not None:
                entries.append(self._entry(group, event, raw_id, origin, before))
        return EventPage(events, encode_position(self._positions))

    def select(self, limit: int) -> Selected:
        """The merged read with the script's filter (`selecting`): the first `limit` events it
        selected among the first `self._limit` read, as `FeedSelection.pick` answers from the
        merged whole entries."""
        heap = self._heap()
        return selected_of(
            self._candidates(heap),
            self._limit,
            limit,
            end=lambda: encode_position(self._positions),
            more=lambda _: bool(heap),
        )

    def _candidates(self, heap: list[tuple[tuple[int, int], int]]) -> Iterator[FeedEntry | None]:
        """The first `self._limit` merged events, each an entry, or None for one the script's
        filter passed over."""
        for _ in range(self._limit):
            if not heap:
                return
            group, raw_id, value, origin, before = self._next_of(heap)
            yield self._entry(group, _event(raw_id, value), raw_id, origin, before) if value else None

    def _heap(self) -> list[tuple[tuple[int, int], int]]:
        heap = [(buffer[-1][:2], group) for group, buffer in enumerate(self._buffers) if buffer]
        heapq.heapify(heap)
        return heap

    def _next_of(self, heap: list[tuple[tuple[int, int], int]]) -> tuple[int, bytes, bytes, bytes, bytes]:
        """The least buffered event, its group's position moved past it: its group, entry ID,
        event, origin and tag before."""
        _, group = heapq.heappop(heap)
        ms, seq, number, raw_id, value, origin, before = self._buffers[group].pop()
        self._positions[group] = (ms, seq, number)
        # Every group with more to read keeps one buffered event, so the heap's least is the
        # least of all.
        if not self._buffers[group] and not self._exhausted[group]:
            self._refill(group)
        if self._buffers[group]:
            heapq.heappush(heap, (self._buffers[group][-1][:2], group))
        return group, raw_id, value, origin, before

    def _entry(self, group: int, event: Event, raw_id: bytes, origin: bytes, before: bytes) -> FeedEntry:
        """The entry of `event`, just read from `group`, with the position after it."""
        position = encode_position(self._positions)
        before_tag = _tag_before(event, before)
        return FeedEntry(event, f"{group}.{raw_id.decode()}", position, unmarked(origin), before_tag)


class GroupFeeds:
    """Reads the feed of every bucket group of one store."""

    def __init__(self, clients: LazyClient, groups: Groups, run: Callable[..., Any]) -> None:
        self._clients, self._groups, self._run = clients, groups, run
        #: The EVENTS script's SHA-1, as every node knows it once the runner has loaded it.
        self._sha = hashlib.sha1(lua.EVENTS.encode(), usedforsecurity=False).hexdigest()

    def page(self, after: bytes | None, limit: int) -> EventPage:
        if self._groups.count == 1:
            return _one_group(self._single(after, limit))
        return _Merge(self, self._starts(after), limit).page()

    def entries(
        self, after: bytes | None, limit: int, *, read_on: bool = False
    ) -> tuple[list[FeedEntry], bytes]:
        """`page`'s events with their ids, positions and origins. With `read_on`, a group whose
        stream lost events that the position had passed (PlantStore.feed_entries) reads on from
        its position's time, instead of raising FeedExpiredError."""
        if self._groups.count == 1:
            return _one_group_entries(self._single(after, limit, origins=True, read_on=read_on))
        entries: list[FeedEntry] = []
        merge = _Merge(self, self._starts(after), limit, origins=True, read_on=read_on)
        return entries, merge.page(entries).next

    def select(self, after: bytes | None, limit: int, selection: FeedSelection, read_most: int) -> Selected:
        """The first `limit` events that `selection` selects among the `read_most` after `after`,
        the filter judged by the script (PlantStore.feed_select)."""
        selecting = selecting_args(selection)
        if self._groups.count == 1:
            answer = self._single(after, read_most, origins=True, selecting=selecting)
            return _one_group_selected(answer, limit, read_most)
        return _Merge(self, self._starts(after), read_most, origins=True, selecting=selecting).select(limit)

    def count(self, position: bytes) -> int:
        return sum(number for _, _, number in decode_position(position, self._groups.count))

    def _starts(self, after: bytes | None) -> list[tuple[str, Any]]:
        """Where each group's read starts: after its entry ID and count, or at its oldest kept."""
        if after is None:
            return [("", "")] * self._groups.count
        return [(f"{ms}-{seq}", number) for ms, seq, number in decode_position(after, self._groups.count)]

    def _single(
        self,
        after: bytes | None,
        limit: int,
        *,
        origins: bool = False,
        read_on: bool = False,
        selecting: tuple[str, ...] = WHOLE,
    ) -> list[Any]:
        flags = ("1" if origins else "", "1" if read_on else "")
        answer = self._read([(*self._starts(after)[0], limit, *flags, *selecting)])[0]
        if answer[0] == 1:
            raise FeedExpiredError
        return answer

    def now(self) -> bytes:
        answers = self._read([("now", "", 0, "", "", *WHOLE)] * self._groups.count)
        return encode_position([(*_entry_id(answer[1]), int(answer[2])) for answer in answers])

    def _read_one(self, group: int, args: _Read) -> Any:
        groups = self._groups
        return self._run("EVENTS", (groups.feed_key(group),), _events_args(groups.tags[group], args))

    def _read(self, per_group: list[_Read]) -> list[Any]:
        """The EVENTS script's answer for each group. It reads only its declared key (the stream),
        so on a cluster it may run on either node of a moving slot, and runs without the probe."""
        if self._groups.count == 1:
            return [self._read_one(0, per_group[0])]
        return list(self._pipelined(per_group))

    def _pipelined(self, per_group: list[_Read]) -> Iterator[Any]:
        """One pipeline per node; a group whose call failed there (its node has no script yet,
        or its slot moved) is read again through the script runner, which handles both."""
        groups = self._groups
        calls = [(groups.feed_key(g), _events_args(groups.tags[g], args)) for g, args in enumerate(per_group)]
        by_node: dict[int, tuple[Any, list[int]]] = {}
        for g, (key, _) in enumerate(calls):
            node = self._clients.node_for(key)
            by_node.setdefault(id(node), (node, []))[1].append(g)
        answers: list[Any] = [None] * len(calls)
        for node, members in by_node.values():
            pipe = node.pipeline(transaction=False)
            for g in members:
                pipe.evalsha(self._sha, 1, calls[g][0], *calls[g][1])
            try:
                results = pipe.execute(raise_on_error=False)
            except FAILURES:
                # The node is down or cut off, and its replica may be promoted: only a fresh slot
                # map tells, and without a write to one of its groups nothing else reads the map
                # again. So read it in the background: this read fails (503), a later one goes
                # to the promoted node.
                self._clients.suspect(calls[members[0]][0])
                raise
            for g, answer in zip(members, results, strict=True):
                answers[g] = answer
        for g, answer in enumerate(answers):
            if isinstance(answer, Exception):
                if not isinstance(answer, (*FAILURES,)):
                    raise answer
                answers[g] = self._run("EVENTS", (calls[g][0],), calls[g][1])
        return iter(answers)


def _events_args(hash_tag: str, read: _Read) -> tuple[Any, ...]:
    """The EVENTS script's arguments for one group's `read`: its record's, then the filter's ids
    and tags."""
    return (*EventsArgs(hash_tag, "", *read[:9]), *read[9:])
