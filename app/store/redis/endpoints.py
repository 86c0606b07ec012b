"""The Redis store's webhook endpoints: each call one script (lua.py), every key in one slot.

A change through the API (add, update, remove) carries a deadline, as a plant's write does
(deadline.py): it takes effect within the store's timeout of its start or never, so that a change
answered 503 while Redis stalls does not land once Redis goes on.
"""

from __future__ import annotations

import secrets
from typing import Any

from app.store.endpoints import ATTEMPTS_KEPT, Acked, Endpoint, outcome_as_read
from app.store.redis.client import LazyClient, ScriptRunner
from app.store.redis.deadline import Deadline
from app.store.redis.failures import FAILURES, RedisBacked
from app.store.redis.lua import (
    HookAckArgs,
    HookAddArgs,
    HookLeaseArgs,
    HookReleaseArgs,
    HookRemoveArgs,
    HookUpdateArgs,
)


def _text(fields: list[bytes]) -> dict[str, str]:
    """HGETALL's flat answer, as text."""
    return {fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields), 2)}


def _fields(answer: Any) -> dict[str, str]:
    """HGETALL's answer as text: a flat list raw, a dict through redis-py's parsing."""
    if isinstance(answer, dict):
        return {key.decode(): value.decode() for key, value in answer.items()}
    return _text(answer)


def _flat(fields: dict[str, str]) -> list[str]:
    return [item for pair in fields.items() for item in pair]


class RedisEndpoints(RedisBacked):
    def __init__(
        self, clients: LazyClient, run: ScriptRunner, prefix: str, *, cluster: bool, window_s: float
    ) -> None:
        self._clients, self._run = clients, run
        self._window_s = window_s
        self._tag = f"{{{prefix}:hooks}}"
        self._ids = f"{self._tag}:ids"
        self._cluster = "1" if cluster else ""

    def _key(self, kind: str, endpoint_id: str) -> str:
        return f"{self._tag}:{kind}:{endpoint_id}"

    def _hash_key(self, endpoint_id: str) -> str:
        return self._key("e", endpoint_id)

    def add(self, endpoint: Endpoint, limit: int) -> bool:
        keys = (self._ids, self._key("e", endpoint.id), f"{self._tag}:seq")
        deadline = Deadline.after(self._window_s)
        head = HookAddArgs(self._tag, self._cluster, deadline.ms, limit, endpoint.id)
        # Never resent after a lost reply (a second run may find the most kept, its own among
        # them): 503.
        args = (*head, *_flat(endpoint.fields()))
        return self._run("HOOK_ADD", keys, args, write=True, deadline=deadline, resend=False) == 1

    def get(self, endpoint_id: str, until: float | None = None) -> Endpoint | None:
        key = self._key("e", endpoint_id)
        fields = self._clients.read(key, "HGETALL", key, until=until)
        return Endpoint.from_fields(endpoint_id, _fields(fields)) if fields else None

    def ids(self) -> list[str]:
        """The ids, the oldest first (the set is scored by a sequence)."""
        return [member.decode() for member in self._clients.read(self._ids, "ZRANGE", self._ids, 0, -1)]

    def all(self) -> list[Endpoint]:
        """The oldest first, in two round trips whatever their number: the ids, then every
        endpoint's fields in one pipeline (all on one node: the keys share the tag's slot)."""
        ids = self.ids()
        if not ids:
            return []
        pipe = self._clients.node_for(self._ids).pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.execute_command("HGETALL", self._hash_key(endpoint_id))
        try:
            answers = pipe.execute()
        except FAILURES:
            # The slot moved, or its node failed: read one by one, following redirects.
            self._clients.forget(self._ids)
            answers = [self._clients.read(key, "HGETALL", key) for key in map(self._hash_key, ids)]
        return [
            Endpoint.from_fields(endpoint_id, _fields(fields))
            for endpoint_id, fields in zip(ids, answers, strict=True)
            if fields
        ]

    def update(self, read: Endpoint, fields: dict[str, str], *, overriding: bool = False) -> bool | None:
        unchanged = outcome_as_read(read, fields, overriding)
        deadline = Deadline.after(self._window_s)
        head = HookUpdateArgs(self._tag, self._cluster, deadline.ms, read.rev, len(unchanged))
        args = (*head, *_flat(unchanged), *_flat(fields))
        # Resent after a lost reply: a second run finds the revision moved, and the caller reads
        # the endpoint again (app/plants/webhooks.py), finding its own change.
        answer = self._run("HOOK_UPDATE", (self._key("e", read.id),), args, write=True, deadline=deadline)
        return None if answer == 0 else answer == 1

    def remove(self, endpoint_id: str) -> bool:
        keys = (self._ids, *(self._key(kind, endpoint_id) for kind in "eal"))
        deadline = Deadline.after(self._window_s)
        args = HookRemoveArgs(self._tag, self._cluster, deadline.ms, endpoint_id)
        # Never resent after a lost reply (a second run would answer "not kept", 404): 503.
        return self._run("HOOK_REMOVE", keys, args, write=True, deadline=deadline, resend=False) == 1

    def attempts(self, endpoint_id: str) -> list[str]:
        key = self._key("a", endpoint_id)
        return [text.decode() for text in self._clients.read(key, "LRANGE", key, 0, -1)]

    def lease(self, endpoint_id: str, owner: str, ttl_ms: int) -> Endpoint | None:
        keys = (self._key("l", endpoint_id), self._key("e", endpoint_id))
        fields = self._run("HOOK_LEASE", keys, HookLeaseArgs(self._tag, self._cluster, owner, ttl_ms))
        return Endpoint.from_fields(endpoint_id, _text(fields)) if fields else None

    def renew(self, endpoint_ids: list[str], owner: str, ttl_ms: int) -> list[bool]:
        if not endpoint_ids:
            return []
        keys = tuple(self._key("l", endpoint_id) for endpoint_id in endpoint_ids)
        args = HookLeaseArgs(self._tag, self._cluster, owner, ttl_ms)
        return [held == 1 for held in self._run("HOOK_RENEW", keys, args)]

    def release(self, endpoint_id: str, owner: str) -> None:
        self._run(
            "HOOK_RELEASE", (self._key("l", endpoint_id),), HookReleaseArgs(self._tag, self._cluster, owner)
        )

    def ack(
        self,
        endpoint_id: str,
        owner: str,
        ttl_ms: int,
        epoch: int,
        fields: dict[str, str],
        attempt: str | None,
        rev: int | None = None,
    ) -> Acked | None:
        keys: Any = tuple(self._key(kind, endpoint_id) for kind in "lea")
        # Resent after a lost reply: its token tells a second run that the first stored it all.
        token = secrets.token_hex(8)
        head = HookAckArgs(
            self._tag,
            self._cluster,
            owner,
            ttl_ms,
            epoch,
            attempt or "",
            ATTEMPTS_KEPT,
            token,
            "" if rev is None else rev,
        )
        args = (*head, *_flat(fields))
        answer = self._run("HOOK_ACK", keys, args, write=True)
        if answer[0] == 0:
            return None
        return Acked(answer[1].decode(), int(answer[2]), stored=answer[0] == 1)
