"""Where a plant lives in Redis: its bucket group, the group's hash tag, and how values are encoded.

Plants are split into bucket groups by id, and every key of a group carries the group's hash
tag, so each script's keys sit in one Redis Cluster slot. A single Redis has one group whose tag
is `{prefix}` (the layout of 1.0.0 and 1.1.0). A cluster has `CLUSTER_GROUPS` groups whose tags
are chosen so that their slots are evenly spaced over the 16,384: however the slots are split
into contiguous ranges between shards, each shard holds its share of the groups.
"""

from __future__ import annotations

from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from app.store.base import KEEP, UNCONDITIONAL, Plant, Precondition, StoreUnavailableError, encode
from app.store.redis.lua import ChangeArgs, CreateArgs, DeleteArgs

__all__ = ["BUCKETS", "CLUSTER_GROUPS", "Groups", "decode", "decode_fields", "encode", "member"]

BUCKETS = 1 << 16
#: Groups on a cluster: 24 divides evenly among 2, 3, 4, 6, 8 and 12 shards.
CLUSTER_GROUPS = 24
_SIGN = 1 << 63


def member(plant_id: int) -> bytes:
    """The id as an index member: 8 bytes that sort as the id does, then the decimal id."""
    return (plant_id + _SIGN).to_bytes(8, "big") + str(plant_id).encode()


def decode(value: bytes, plant_id: int, groups: Groups) -> Plant:
    return Plant(*decode_fields(value, plant_id, groups))


def decode_fields(value: bytes, plant_id: int, groups: Groups) -> tuple[str, str | None]:
    """The name and tag of plant `plant_id` of `groups`; StoreUnavailableError (`unreadable`) for a
    value not encoded as this service writes plants (`readable` in scripts/library.lua refuses the
    same ones)."""
    length, colon, rest = value.partition(b":")
    size = int(length) if colon and length.isdigit() else -1
    try:
        if 0 <= size <= len(rest):
            tag = rest[size:]
            return rest[:size].decode("utf-8"), tag.decode("utf-8") if tag else None
    except UnicodeDecodeError:
        pass
    # Not a ValueError: the views read one as a cursor this store did not make.
    raise StoreUnavailableError(
        "unreadable",
        f"plant {plant_id} (field {plant_id} of {groups.bucket_key(plant_id)}) is not stored as this service"
        " writes plants",
    )


def precondition_args(precondition: Precondition) -> list[str | int]:
    """A precondition as the scripts read it: for If-Match then If-None-Match, how many tags
    ('' when the header was not sent), then the tags."""
    args: list[str | int] = []
    for tags in (precondition.if_match, precondition.if_none_match):
        args += [""] if tags is None else [len(tags), *sorted(tags)]
    return args


def _spaced_tag(prefix: str, group: int, count: int) -> str:
    """The first tag `{prefix:n}` whose slot falls in the group's 1/count of the slot space."""
    low, high = group * REDIS_CLUSTER_HASH_SLOTS // count, (group + 1) * REDIS_CLUSTER_HASH_SLOTS // count
    n = 0
    while not low <= key_slot(f"{prefix}:{n}".encode()) < high:
        n += 1
    return f"{{{prefix}:{n}}}"


class Groups:
    """The bucket groups of one store: each group's tag, slot, and share of the capacity."""

    def __init__(self, prefix: str, *, count: int, capacity: int, cluster: bool, retain: int = 0) -> None:
        self.count = count
        self.tags = [f"{{{prefix}}}"] if count == 1 else [_spaced_tag(prefix, g, count) for g in range(count)]
        #: Every script's second argument: '1' on a cluster (see lua.py), else ''.
        self.cluster_arg = "1" if cluster else ""
        #: Each group's capacity; they add up to the store's exactly.
        self.quotas = [capacity // count + (g < capacity % count) for g in range(count)]
        #: Every write's third argument: the feed's retention, per group ('0': no feed).
        self.retain_arg = str(retain)

    def of(self, plant_id: int) -> int:
        return (plant_id & (BUCKETS - 1)) % self.count

    def bucket_key(self, plant_id: int) -> str:
        return f"{self.tags[self.of(plant_id)]}:b:{plant_id & (BUCKETS - 1)}"

    def count_key(self, group: int) -> str:
        return f"{self.tags[group]}:count"

    def feed_key(self, group: int) -> str:
        return f"{self.tags[group]}:events"

    def _write_keys(self, plant_id: int, g: int) -> tuple[str, str, str]:
        return self.bucket_key(plant_id), self.count_key(g), self.feed_key(g)

    def _write_args(self, g: int, deadline_ms: int | None) -> tuple[str, str, str, int | str]:
        """Every write's first arguments: the group's tag, the cluster's flag, the feed's retention
        and the deadline (deadline.py), '' for none, as the benchmarks' direct loads pass."""
        return self.tags[g], self.cluster_arg, self.retain_arg, "" if deadline_ms is None else deadline_ms

    def create_call(
        self,
        plant_id: int,
        value: bytes,
        *,
        rewrite: bool = False,
        deadline_ms: int | None = None,
        origin: str = "",
    ) -> tuple[tuple[str, str, str], CreateArgs]:
        """The CREATE script's keys and arguments (`rewrite`: see the script)."""
        g = self.of(plant_id)
        args = CreateArgs(
            *self._write_args(g, deadline_ms),
            plant_id,
            value,
            self.quotas[g],
            member(plant_id),
            "1" if rewrite else "",
            origin,
        )
        return self._write_keys(plant_id, g), args

    def delete_call(
        self,
        plant_id: int,
        precondition: Precondition = UNCONDITIONAL,
        *,
        deadline_ms: int | None = None,
        origin: str = "",
    ) -> tuple[tuple[str, str, str], tuple]:
        """The DELETE script's keys and arguments: DeleteArgs, then the precondition if any."""
        g = self.of(plant_id)
        keys = self._write_keys(plant_id, g)
        args = DeleteArgs(*self._write_args(g, deadline_ms), plant_id, member(plant_id), origin)
        return keys, args if precondition is UNCONDITIONAL else (*args, *precondition_args(precondition))

    def change_call(
        self,
        plant_id: int,
        name: Any,
        tag: Any,
        precondition: Precondition,
        *,
        create: bool,
        deadline_ms: int | None = None,
        origin: str = "",
    ) -> tuple[tuple[str, str, str], tuple]:
        """The CHANGE script's keys and arguments: ChangeArgs, then the precondition (KEEP: see
        the script)."""
        g = self.of(plant_id)
        args = ChangeArgs(
            *self._write_args(g, deadline_ms),
            plant_id,
            member(plant_id),
            self.quotas[g],
            "1" if create else "",
            "" if name is KEEP else name,
            "k" if tag is KEEP else "n" if tag is None else "s" + tag,
            origin,
        )
        return self._write_keys(plant_id, g), (*args, *precondition_args(precondition))

    def position(self, group: int, after: int | None) -> bytes:
        """Where a walk of pages resumes: after `after` in `group`, or at the group's start."""
        id_bytes = b"" if after is None else after.to_bytes(8, "big", signed=True)
        return id_bytes if self.count == 1 else bytes([group]) + id_bytes

    def resume(self, position: bytes) -> tuple[int, int | None]:
        """The group and id a position names; ValueError for one this store did not make."""
        if self.count == 1 and len(position) == 8:
            return 0, int.from_bytes(position, "big", signed=True)
        if self.count > 1 and len(position) in (1, 9) and position[0] < self.count:
            return position[0], int.from_bytes(position[1:], "big", signed=True) if position[1:] else None
        raise ValueError("not a position of this store")
