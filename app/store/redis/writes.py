"""The Redis store's plant writes: one script each (CREATE, CHANGE, DELETE) with a deadline after
which Redis refuses it, its lost reply learnt from the feed (lost.py), never by resending it."""

from __future__ import annotations

import threading
from typing import Any

from app.store.base import (
    KEEP,
    UNCONDITIONAL,
    Change,
    CreateOutcome,
    Plant,
    Precondition,
    PreconditionFailedError,
    StoreFullError,
)
from app.store.redis.client import LazyClient
from app.store.redis.deadline import Deadline
from app.store.redis.groups import Groups, decode, encode
from app.store.redis.hints import GroupHints
from app.store.redis.lost import LostReplies
from app.store.redis.origins import mark_of, marked

_OUTCOMES = (CreateOutcome.CREATED, CreateOutcome.IDENTICAL, CreateOutcome.CONFLICT)
_CHANGES = (Change.CREATED, Change.CHANGED, Change.UNCHANGED, Change.ABSENT)


class PlantWrites:
    """Creates, changes and deletes plants, each write taking effect within `window_s` of its
    start or never; `rewrite` has a write rewrite its bucket for the replicas to confirm."""

    def __init__(
        self,
        clients: LazyClient,
        groups: Groups,
        hints: GroupHints,
        lost: LostReplies,
        *,
        window_s: float,
        rewrite: bool,
    ) -> None:
        self._clients, self._groups, self._hints, self._lost = clients, groups, hints, lost
        self._window_s, self._rewrite = window_s, rewrite
        #: Each thread's last change's or delete's tag before, as its script answered (`tag_before`);
        #: None when not known: a lost reply's answer is its event's, which does not tell it. And the
        #: mark of its last write (`mark`), by which its listener knows the write's event again.
        self._before = threading.local()

    def create(self, plant_id: int, name: str, tag: str | None, *, origin: str = "") -> CreateOutcome:
        self._hints.note(self._clients, plant_id, tag)
        deadline = Deadline.after(self._window_s)
        origin = self._marked(origin)
        keys, args = self._groups.create_call(
            plant_id, encode(name, tag), rewrite=self._rewrite, deadline_ms=deadline.ms, origin=origin
        )
        answer = self._lost.write("CREATE", keys, args, deadline, plant_id, origin)
        if answer == 3:
            raise StoreFullError
        return _OUTCOMES[answer]

    def delete(self, plant_id: int, precondition: Precondition = UNCONDITIONAL, *, origin: str = "") -> bool:
        deadline = Deadline.after(self._window_s)
        origin = self._marked(origin)
        keys, args = self._groups.delete_call(plant_id, precondition, deadline_ms=deadline.ms, origin=origin)
        # Its first write is HDEL, which Redis allows at maxmemory: a full store can delete.
        answer = self._lost.write("DELETE", keys, args, deadline, plant_id, origin)
        deleted = isinstance(answer, list)  # {1, its tag}; a lost reply's answer is 1
        self._before.tags = (_tag(answer[1]),) if deleted else None
        if answer == 2:
            raise PreconditionFailedError
        return deleted or answer == 1

    def change(
        self, plant_id: int, name: Any, tag: Any, precondition: Precondition, *, create: bool, origin: str
    ) -> tuple[Change, Plant | None]:
        if create or (tag is not KEEP and tag is not None):
            # A PUT may create the plant: its group goes into the hints as a create's does, or a
            # cluster's pages would skip a group that only PUTs had filled.
            self._hints.note(self._clients, plant_id, None if tag is KEEP else tag)
        deadline = Deadline.after(self._window_s)
        origin = self._marked(origin)
        keys, args = self._groups.change_call(
            plant_id, name, tag, precondition, create=create, deadline_ms=deadline.ms, origin=origin
        )
        answer = self._lost.write("CHANGE", keys, args, deadline, plant_id, origin)
        code = answer[0]
        if code == 4:
            raise PreconditionFailedError
        if code == 5:
            raise StoreFullError
        self._before.tags = (_tag(answer[2]),) if len(answer) > 2 else None
        return _CHANGES[code], (decode(answer[1], plant_id, self._groups) if len(answer) > 1 else None)

    def _marked(self, origin: str) -> str:
        """`origin` with this write's own mark (for its lost reply, and its listener), kept as this
        thread's last (`write_mark`)."""
        origin = marked(origin)
        self._before.mark = mark_of(origin.encode())
        return origin

    def write_mark(self) -> bytes | None:
        """The mark of this thread's last write (None: it had no origin, or none was made)."""
        mark: bytes | None = getattr(self._before, "mark", None)
        return mark

    def tag_before(self) -> tuple[str | None] | None:
        """The tag before of this thread's change or delete just made, as its script answered;
        None (not known) after a lost reply, or in a thread that has made neither."""
        tags: tuple[str | None] | None = getattr(self._before, "tags", None)
        return tags


def _tag(raw: bytes) -> str | None:
    """A tag as a script answers it: '' for none."""
    return raw.decode() if raw else None
