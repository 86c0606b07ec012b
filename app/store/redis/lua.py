"""The Redis store's key layout and its Lua scripts: every write, and every page, is one script.

The scripts are `.lua` files in `scripts/`, each run with `scripts/library.lua` before it; this
module reads them once, by name. Each script names its keys and arguments at its top
(`local deadline = ARGV[4]`); the arguments are built from the script's record below, whose
fields are those names in that order (tests/unit/test_lua_records.py holds them equal). A
script that takes any number of trailing arguments (a precondition, fields and values) names
where they start (`local fields_at = 5`); its caller adds them after the record's.

Every key of a bucket group starts with the group's hash tag (written `P` below: `{prefix}` for
the one group of a single Redis, `{prefix:n}` for each of a cluster's 24; see groups.py),
so each script's keys sit in one Redis Cluster slot:

- `P:b:<n>`: one of 65,536 buckets, a small hash from the decimal id to the encoded plant (the
  layout of 1.0.0). Redis keeps small hashes as compact listpacks. The bucket is the id's low
  16 bits: fixed forever, so the same id always finds the same bucket (and group).
- `P:count`: how many plants the group holds, for its share of the capacity.
- `P:layout`: present once the indexes below hold every plant (set by the first create into an
  empty store, and by `python -m app.store.migrate` for a store written by 1.0.0).
- `{prefix}:cursor-key`: the random secret that signs page cursors, made by the first page, and
  `{prefix}:groups:<hint>`, the groups each index has used (hints.py): outside any group.
- Two kinds of index, each a B-tree of two levels in sorted sets: index `a` holds every plant,
  index `t<tag>` the plants with that tag. An index's *leaves* `P:l:<fence id>:<index>` are
  sorted sets of fewer than `LEAF_SIZE` (64) members, so Redis keeps them as listpacks (about
  25 bytes a member); its *fence* `P:f:<index>` holds the smallest member of each leaf (the
  first leaf's is the empty string). A leaf that reaches `LEAF_SIZE` keeps its lowest
  `LEAF_SIZE / 2` members and gives the rest to a new leaf; an emptied leaf is removed. Finding
  a member's leaf is one ZREVRANGEBYLEX on the fence: O(log n). Every ZADD into a listpack
  walks the leaf twice (to find the member, then its place), so a leaf's size is most of a
  create's cost in Redis: leaves of 64 cost a sequential create fewer of Redis's instructions
  than leaves of 128, for a few bytes a plant more (bench/FIGURES.md has the figures). Stores
  written before, whose leaves hold up to 127 members, are read as they are; such a leaf splits
  at its next insert.

An index member is the id as 8 bytes that sort as the id does (big-endian, sign bit flipped),
then the decimal id. All scores are 0, so members sort by their bytes (ZRANGEBYLEX); the
decimal part names the id's bucket field. Lua compares members through their numbers, never
with `<` on strings, which follows the server's locale.

A plant is encoded as `<name length in bytes>:<name><tag>`; the tag is never empty, so a value
without tag bytes is a plant without a tag.
"""

from __future__ import annotations

from importlib import resources
from typing import NamedTuple

#: The most members an index leaf holds (`LEAF_SIZE` in scripts/library.lua).
LEAF_SIZE = 64


def _script(name: str) -> str:
    return resources.files(__package__).joinpath("scripts", f"{name}.lua").read_text("utf-8")


_LIBRARY = _script("library")
assert f"local LEAF_SIZE = {LEAF_SIZE}\n" in _LIBRARY

CREATE = _LIBRARY + _script("create")
DELETE = _LIBRARY + _script("delete")
CHANGE = _LIBRARY + _script("change")
PAGE = _LIBRARY + _script("page")
INDEX = _LIBRARY + _script("index")
EVENTS = _LIBRARY + _script("events")
SETTLE = _LIBRARY + _script("settle")

# Webhook endpoints (endpoints.py): every key starts with the endpoints' own hash tag
# `{prefix:hooks}` (written `T`), so that all of them sit in one slot: `T:ids`, the ids in a sorted
# set scored by `T:seq` (the order they were added in);
# `T:e:<id>`, an endpoint's fields; `T:a:<id>`, its latest attempts; `T:l:<id>`, its lease.
HOOK_ADD = _LIBRARY + _script("hook_add")
HOOK_UPDATE = _LIBRARY + _script("hook_update")
HOOK_REMOVE = _LIBRARY + _script("hook_remove")
HOOK_LEASE = _LIBRARY + _script("hook_lease")
HOOK_RENEW = _LIBRARY + _script("hook_renew")
HOOK_RELEASE = _LIBRARY + _script("hook_release")
HOOK_ACK = _LIBRARY + _script("hook_ack")


class CreateArgs(NamedTuple):
    """CREATE's arguments (scripts/create.lua). Every write starts with the same four."""

    hash_tag: str
    cluster: str
    retention: str
    deadline: int | str
    plant_id: int
    value: bytes
    capacity: int
    member: bytes
    rewrite: str
    origin: str


class DeleteArgs(NamedTuple):
    """DELETE's arguments (scripts/delete.lua); a conditional delete's precondition follows."""

    hash_tag: str
    cluster: str
    retention: str
    deadline: int | str
    plant_id: int
    member: bytes
    origin: str


class ChangeArgs(NamedTuple):
    """CHANGE's arguments (scripts/change.lua); the precondition follows."""

    hash_tag: str
    cluster: str
    retention: str
    deadline: int | str
    plant_id: int
    member: bytes
    capacity: int
    create: str
    name: str
    tag_change: str
    origin: str


class PageArgs(NamedTuple):
    """PAGE's arguments (scripts/page.lua); the indexes to read follow."""

    hash_tag: str
    cluster: str
    after: bytes
    limit: int


class IndexArgs(NamedTuple):
    """INDEX's arguments (scripts/index.lua); pairs of member and encoded plant follow."""

    hash_tag: str
    cluster: str


class EventsArgs(NamedTuple):
    """EVENTS's arguments (scripts/events.lua)."""

    hash_tag: str
    cluster: str
    after: str
    number: int | str
    limit: int
    origins: str
    read_on: str
    #: '1' judges a filter (FeedSelection) in the script; the ids, then the tags, follow as
    #: trailing arguments from `select_at` (feed.py: `selecting_args`).
    selecting: str
    kinds: str
    id_count: str
    tag_count: str


class SettleArgs(NamedTuple):
    """SETTLE's arguments (scripts/settle.lua)."""

    hash_tag: str
    cluster: str
    origin: str
    plant_id: int
    oldest: int
    most: int


class HookAddArgs(NamedTuple):
    """HOOK_ADD's arguments (scripts/hook_add.lua); the endpoint's fields and values follow. Each
    change of an endpoint has a deadline, as a plant's write has (deadline.py)."""

    hash_tag: str
    cluster: str
    deadline: int
    most: int
    endpoint_id: str


class HookUpdateArgs(NamedTuple):
    """HOOK_UPDATE's arguments (scripts/hook_update.lua); `unchanged` fields and the values they
    must hold follow, then the fields and values to write."""

    hash_tag: str
    cluster: str
    deadline: int
    rev: int
    unchanged: int


class HookRemoveArgs(NamedTuple):
    """HOOK_REMOVE's arguments (scripts/hook_remove.lua)."""

    hash_tag: str
    cluster: str
    deadline: int
    endpoint_id: str


class HookLeaseArgs(NamedTuple):
    """HOOK_LEASE's and HOOK_RENEW's arguments (scripts/hook_lease.lua, hook_renew.lua)."""

    hash_tag: str
    cluster: str
    owner: str
    lease_ms: int


class HookReleaseArgs(NamedTuple):
    """HOOK_RELEASE's arguments (scripts/hook_release.lua)."""

    hash_tag: str
    cluster: str
    owner: str


class HookAckArgs(NamedTuple):
    """HOOK_ACK's arguments (scripts/hook_ack.lua); fields and values follow."""

    hash_tag: str
    cluster: str
    owner: str
    lease_ms: int
    epoch: int
    attempt: str
    attempts_kept: int
    token: str
    rev: int | str
