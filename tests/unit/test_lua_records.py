"""The Redis store's Lua scripts and the records that build their arguments cannot drift apart.

Each script names its keys and arguments at its top (`local deadline = ARGV[4]`), the library
names the first two every script shares, and a script that takes trailing arguments says where
they start (`local fields_at = 5`). The names, in ARGV order, are the fields of the script's
record in app/store/redis/lua.py; below its header, a script reads no KEYS or ARGV by number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.store.base import UNCONDITIONAL, Precondition
from app.store.redis import lua
from app.store.redis.groups import Groups

SCRIPTS = Path(lua.__file__).parent / "scripts"
#: Each script's record.
RECORDS = {
    "create": lua.CreateArgs,
    "delete": lua.DeleteArgs,
    "change": lua.ChangeArgs,
    "page": lua.PageArgs,
    "index": lua.IndexArgs,
    "events": lua.EventsArgs,
    "settle": lua.SettleArgs,
    "hook_add": lua.HookAddArgs,
    "hook_update": lua.HookUpdateArgs,
    "hook_remove": lua.HookRemoveArgs,
    "hook_lease": lua.HookLeaseArgs,
    "hook_renew": lua.HookLeaseArgs,
    "hook_release": lua.HookReleaseArgs,
    "hook_ack": lua.HookAckArgs,
}
NAMED = re.compile(r"local (\w+) = (?:tonumber\()?(KEYS|ARGV)\[(\d+)\]\)?(?: --.*)?")
TAIL = re.compile(r"local (\w+_at) = (\d+)")
BY_NUMBER = re.compile(r"\b(?:KEYS|ARGV)\[\d+\]")


class Header:
    """A script's header: its named keys and arguments by number, and where its tail starts."""

    def __init__(self, name: str) -> None:
        self.keys: dict[int, str] = {}
        self.args: dict[int, str] = {}
        self.tail: int | None = None
        lines = (SCRIPTS / f"{name}.lua").read_text().splitlines()
        while lines and (not lines[0] or lines[0].startswith("--") or self._named(lines[0])):
            lines.pop(0)
        #: The code below the header, without its comments.
        self.body = [line.split("--")[0] for line in lines]

    def _named(self, line: str) -> bool:
        if named := NAMED.fullmatch(line):
            (self.keys if named[2] == "KEYS" else self.args)[int(named[3])] = named[1]
        elif tail := TAIL.fullmatch(line):
            self.tail = int(tail[2])
        return bool(named or tail)


def test_every_script_has_a_record():
    assert {path.stem for path in SCRIPTS.glob("*.lua")} - {"library"} == set(RECORDS)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_a_scripts_named_arguments_are_its_records_fields_in_order(name):
    library, header = Header("library"), Header(name)
    assert library.args == {1: "hash_tag", 2: "cluster"}
    assert set(header.args).isdisjoint(library.args)
    named = {**library.args, **header.args}
    assert sorted(named) == list(range(1, len(named) + 1)), "a gap in the named arguments"
    assert tuple(named[n] for n in sorted(named)) == RECORDS[name]._fields
    if header.tail is not None:
        assert header.tail == len(named) + 1, "the trailing arguments start right after the named ones"
    assert sorted(header.keys) == list(range(1, len(header.keys) + 1))


@pytest.mark.parametrize("name", ["library", *sorted(RECORDS)])
def test_no_script_reads_keys_or_arguments_by_number_below_its_header(name):
    assert [line for line in Header(name).body if BY_NUMBER.search(line)] == []


@pytest.mark.parametrize("cluster", [False, True])
def test_the_writes_pass_as_many_keys_as_their_scripts_name(cluster):
    groups = Groups("p", count=24 if cluster else 1, capacity=100, cluster=cluster, retain=10)
    precondition = Precondition(if_match=frozenset({"abc"}), if_none_match=None)
    calls = {
        "create": groups.create_call(7, b"4:Fern"),
        "delete": groups.delete_call(7, UNCONDITIONAL),
        "change": groups.change_call(7, "Fern", None, precondition, create=False),
    }
    for name, (keys, args) in calls.items():
        header = Header(name)
        assert len(keys) == len(header.keys)
        # Each key carries the group's hash tag, the first argument: one slot on a cluster.
        assert all(key.startswith(args[0]) for key in keys)
    # The precondition follows the record: its count of If-Match tags, then the tag.
    assert calls["change"][1][len(lua.ChangeArgs._fields) :] == (1, "abc", "")
