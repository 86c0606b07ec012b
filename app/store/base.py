"""What every plant store is: the interface the blueprint uses, its outcomes and its failures."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from app.store.endpoints import EndpointStore
    from app.store.readiness import Readiness


class CreateOutcome(enum.Enum):
    """What a create did."""

    CREATED = "created"
    #: A plant with this id and the same name and tag was already stored (a retry).
    IDENTICAL = "identical"
    #: A plant with this id but another name or tag is stored; nothing changed.
    CONFLICT = "conflict"


class Change(enum.Enum):
    """What a replace or a merge patch did."""

    CREATED = "created"
    CHANGED = "changed"
    #: The plant already had this name and tag: nothing was written.
    UNCHANGED = "unchanged"
    #: No plant has this id, and none was created (a patch, or a replace under If-Match).
    ABSENT = "absent"


class Plant(NamedTuple):
    name: str
    tag: str | None = None


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: A change's name or tag that keeps the stored one (a merge patch that does not name it).
KEEP: Any = _Keep()


#: The wildcard `*` of If-Match and If-None-Match, as a Precondition holds it: a space cannot
#: stand in an entity-tag's opaque value (RFC 9110 §8.8.3), so no sent tag equals it. The Lua
#: scripts compare with the same string.
ANY_PLANT = " *"


class Precondition(NamedTuple):
    """A write's precondition (RFC 9110 §13.1.1 to 13.1.2), checked by the store in the write's step.

    Each is None when its header was not sent, else the entity-tags it lists (opaque values,
    without quotes), or ANY_PLANT for the header's unquoted `*`. The entity-tag `"*"` is an
    ordinary tag (opaque value `*`) that no plant has.
    """

    if_match: frozenset[str] | None = None
    if_none_match: frozenset[str] | None = None

    def allows(self, current: str) -> bool:
        """Whether a write may change the plant whose ETag is `current`."""
        if self.if_match is not None and ANY_PLANT not in self.if_match and current not in self.if_match:
            return False
        return self.if_none_match is None or (
            ANY_PLANT not in self.if_none_match and current not in self.if_none_match
        )

    def allows_absent(self) -> bool:
        """Whether a write may go on where there is no current representation (no plant with the
        id, a resource that never has one): If-Match is then false whatever it lists, `*`
        included (RFC 9110 §13.1.1), and If-None-Match true (§13.1.2)."""
        return self.if_match is None


#: No precondition.
UNCONDITIONAL = Precondition()


def encode(name: str, tag: str | None) -> bytes:
    """A plant's one encoding: `<name length in bytes>:<name><tag>` (a tag is never empty)."""
    name_bytes = name.encode("utf-8")
    return b"%d:%s%s" % (len(name_bytes), name_bytes, tag.encode("utf-8") if tag else b"")


def plant_etag(name: str, tag: str | None) -> str:
    """The plant's entity-tag: derived from its name and tag alone, so every store, worker and
    host gives the same one, and it costs no stored byte. The Redis scripts compute it too, as
    `string.sub(redis.sha1hex(value), 1, 16)` of the same encoding."""
    return hashlib.sha1(encode(name, tag), usedforsecurity=False).hexdigest()[:16]


#: A plant of a page: its id, name and tag. (A plain tuple: a page has up to 1,000 of them.)
StoredPlant = tuple[int, str, str | None]


class Page(NamedTuple):
    """Up to `limit` plants, and where the next page starts (None after the last page).

    `next` is the store's own position, opaque to the caller, who signs it into a cursor and
    passes it back as the next page's `after`.
    """

    plants: list[StoredPlant]
    next: bytes | None


def id_position(plant_id: int) -> bytes:
    """The position after `plant_id` in a store that pages in id order."""
    return plant_id.to_bytes(8, "big", signed=True)


def position_id(position: bytes) -> int:
    """The id an `id_position` names; ValueError for anything else."""
    if len(position) != 8:
        raise ValueError("not a position of this store")
    return int.from_bytes(position, "big", signed=True)


#: An event's type, by its kind number (as the Redis scripts record it).
EVENT_TYPES = ("plant.created", "plant.updated", "plant.deleted")
CREATED_EVENT, UPDATED_EVENT, DELETED_EVENT = range(3)


class Event(NamedTuple):
    """One change in the feed: its kind (an index of EVENT_TYPES), the plant after it (for a
    delete, as it was), and when it took effect, in milliseconds since the epoch (UTC)."""

    kind: int
    plant_id: int
    name: str
    tag: str | None
    time_ms: int


class FeedEntry(NamedTuple):
    """An event as a deliverer reads it: its id (the same each time it is read, different for every
    event the store ever records), the position just after it, and its origin."""

    event: Event
    id: str
    position: bytes
    #: What the write that made the event was given as `origin` ('' for none): the request's id,
    #: then, when the write was traced, a space and its W3C `traceparent` (app/telemetry/).
    origin: str = ""
    #: The plant's tag before the change (None: it had none): another than `event.tag` only for
    #: an update that moved the plant to another tag, so that a filtered watch selects a plant
    #: that matched before or after. The stores set it on every entry they read.
    tag_before: str | None = None


class EventPage(NamedTuple):
    """Up to `limit` events, and the position after them (the same position when there are none)."""

    events: list[Event]
    next: bytes


class Selected(NamedTuple):
    """One filtered read: the entries selected; the position after the last event read (after
    the last entry when `limit` were found); how many events were read, and how many of them
    after the last entry selected; and whether the read reached the feed's end."""

    entries: list[FeedEntry]
    end: bytes
    read: int
    passed: int
    at_end: bool


class FeedSelection(NamedTuple):
    """Which events a reader selects; None in a field: that part was not given. Different parts
    combine with AND, the values of one with OR. An event is selected when its plant matches
    **before or after** its change: its kind is one of `kinds`, its id one of `ids`, and its tag
    after the change or before it one of `tags`. A store answers a filtered read with only the
    entries selected (`PlantStore.feed_select`): the memory store judges its columns before it
    makes an entry, so that passing over what a watch does not select builds nothing, as Redis's
    feed script does (app/store/redis/feed.py). Each answers what `pick` answers from whole
    entries."""

    tags: frozenset[str] | None = None
    ids: frozenset[int] | None = None
    kinds: frozenset[int] | None = None

    def selects(self, kind: int, plant_id: int, tag: str | None, before: str | None) -> bool:
        if self.kinds is not None and kind not in self.kinds:
            return False
        if self.ids is not None and plant_id not in self.ids:
            return False
        tags = self.tags
        return tags is None or tag in tags or before in tags

    def pick(self, entries: list[FeedEntry], end: bytes, asked: int, limit: int) -> Selected:
        """The first `limit` of `entries` (a read of `asked` events that ended at `end`) that
        this selects."""
        candidates = (
            entry
            if self.selects(entry.event.kind, entry.event.plant_id, entry.event.tag, entry.tag_before)
            else None
            for entry in entries
        )
        return selected_of(candidates, asked, limit, end=lambda: end, more=lambda read: read < len(entries))


def selected_of(
    candidates: Iterable[FeedEntry | None],
    asked: int,
    limit: int,
    *,
    end: Callable[[], bytes],
    more: Callable[[int], bool],
) -> Selected:
    """A filtered read's answer, from its `candidates` in the read's order (at most `asked`): each
    an entry selected, or None for an event passed over. It holds the first `limit` selected;
    `end()` is the position after the last candidate, `more(read)` whether any candidate follows
    the first `read`. Redis's reads, and `pick` that they are held to, answer through it, so that
    they count and end alike: only where their candidates come from differs."""
    found: list[FeedEntry] = []
    read = passed = 0
    for entry in candidates:
        read += 1
        if entry is None:
            passed += 1
            continue
        found.append(entry)
        passed = 0
        if len(found) == limit:
            # Stopped at `limit`: at the feed's end only when no candidate follows this one.
            return Selected(found, entry.position, read, 0, read < asked and not more(read))
    return Selected(found, end(), read, passed, read < asked)


class FeedExpiredError(Exception):
    """Some events after the position have been dropped under the retention: the reader must list
    the store again and follow from a new position."""


class StoreFullError(Exception):
    """The store holds its capacity of plants (or its server its memory) and cannot take a new one."""


class PreconditionFailedError(Exception):
    """The plant exists, and its current ETag does not satisfy the write's precondition: nothing
    changed."""


class StoreUnavailableError(Exception):
    """The store did not answer in time, or cannot write now; the request may be retried.

    `reason` is one of `timeout`, `refused`, `name_not_resolved`, `auth`, `connection`,
    `read_only`, `wrong_kind` (a Redis Cluster node named as a single Redis, or the reverse),
    `wrong_db` (a database index past the server's), `needs_migration`, `evicted` (the mark that
    pages need, evicted by an `allkeys-*` maxmemory-policy), `cluster` (a
    failover, or a slot moving between nodes), `replication` (fewer replicas confirmed a write
    than PLANTS_STORE_MIN_REPLICAS), `unreadable` (a stored plant or event not encoded as this
    service writes them: another program's, or cut short; nothing was written) or `other`. The
    message names what failed, for the log; it
    never contains a password. `node` is the host:port of the one node of a cluster that failed,
    when one did: the log names it rather than the whole cluster.
    """

    def __init__(self, reason: str, message: str, node: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.node = node


class PlantStore(Protocol):
    """What the blueprint needs of a store. Implementations must be thread-safe."""

    #: True when every process that uses the same settings sees the same plants.
    shared: bool

    def create(self, plant_id: int, name: str, tag: str | None, *, origin: str = "") -> CreateOutcome:
        """Store the plant unless its id is taken, atomically. `origin`, here and in every write,
        is kept with the write's event (FeedEntry.origin), never shown in the feed's pages.

        Raises StoreFullError at capacity, StoreUnavailableError when the store cannot answer.
        """
        ...

    def get(self, plant_id: int) -> Plant | None: ...

    def delete(self, plant_id: int, precondition: Precondition = UNCONDITIONAL, *, origin: str = "") -> bool:
        """Remove the plant and free its place under the capacity, atomically; False when absent.

        Raises PreconditionFailedError, having removed nothing, when the plant exists and its
        ETag does not satisfy `precondition`.
        """
        ...

    def change(
        self,
        plant_id: int,
        name: Any,
        tag: Any,
        precondition: Precondition,
        *,
        create: bool,
        origin: str = "",
    ) -> tuple[Change, Plant | None]:
        """Check the precondition and change the plant, in one atomic step; the plant after it.

        `name` and `tag` replace the stored ones, or are KEEP; a tag of None removes the tag, and
        a change of tag moves the plant between tag indexes in the same step. An absent plant is
        created when `create` (a replace: name given, under the capacity: StoreFullError), else
        ABSENT. Raises PreconditionFailedError, having changed nothing, when the plant exists and
        its ETag does not satisfy `precondition`.
        """
        ...

    def page(self, after: bytes | None, limit: int, tags: Collection[str] | None = None) -> Page:
        """At most `limit` plants from the position `after` (from the start when None).

        In ascending id order, except on a Redis Cluster: ascending id within each bucket
        group, group after group. With `tags`, only plants whose tag is one of them. Costs
        O(log n + limit) per tag. ValueError for an `after` this store did not make.
        """
        ...

    #: How many of the latest events the feed keeps at least; 0 when the feed is off.
    events_retain: int

    def events(self, after: bytes | None, limit: int) -> EventPage:
        """At most `limit` events after the position `after` (from the oldest kept when None).

        The events of one plant come in the order their changes took effect; on a Redis Cluster,
        events of plants in different groups may come in another order than in time. Raises
        FeedExpiredError when events after `after` are no longer all kept, ValueError for an
        `after` this store did not make.
        """
        ...

    def events_now(self) -> bytes:
        """The position after the latest event: following it yields only later changes."""
        ...

    def tag_before(self) -> tuple[str | None] | None:
        """The plant's tag before the last change or delete this thread made that the feed
        recorded (a delete's: the deleted plant's), for waking the watchers it concerns; None when
        the store cannot tell (a Redis write whose reply was lost: its listener reads it from the
        feed)."""
        ...

    def write_mark(self) -> bytes | None:
        """The mark of the last write this thread made, unique to it, which the feed's entry of
        that write holds too: the process's listener (`feed_listener`) hears its own writes again,
        and knows them by it. None where there is none (no listener, or a write without one)."""
        ...

    def feed_listener(self) -> Any:
        """What hears other processes' writes to the feed (app/watch/feed_listener.py), or None
        when no other process writes to this store."""
        ...

    def feed_entries(
        self, after: bytes | None, limit: int, *, read_on: bool = False
    ) -> tuple[list[FeedEntry], bytes]:
        """As `events`, each event with its id and the position after it; and the page's end.

        A position past events the store lost (a Redis restarted without them, a replica promoted
        before it had them) raises FeedExpiredError, as one past the retention does: a follower's
        copy holds what was lost. With `read_on`, it reads on from the position's time instead:
        for a reader that has passed those events on and keeps nothing (a webhook deliverer)."""
        ...

    def feed_select(
        self, after: bytes | None, limit: int, selection: FeedSelection, *, read_most: int
    ) -> Selected:
        """As `feed_entries`, reading at most `read_most` events, of which only the first `limit`
        that `selection` selects are answered (FeedSelection, Selected): a filtered watch passes
        over what it does not select without an entry made for it."""
        ...

    def feed_count(self, position: bytes) -> int:
        """How many events the feed had recorded up to `position` (ValueError: not a position)."""
        ...

    #: The webhook endpoints kept beside the plants (app/store/endpoints.py).
    endpoints: EndpointStore

    def cursor_key(self) -> bytes:
        """The secret that signs page cursors, the same for every process that shares the store."""
        ...

    def __len__(self) -> int: ...

    def ping(self) -> None:
        """Return when the store answers; raise StoreUnavailableError otherwise."""
        ...

    def readiness(self) -> Readiness:
        """What the store can serve now (app/store/readiness.py); StoreUnavailableError, with the
        cause, when it can serve no plant operation (down, of the wrong kind, a replica...)."""
        ...

    def close(self) -> None:
        """Close the store's connections, for an app no longer served (nothing to close in memory)."""
        ...
