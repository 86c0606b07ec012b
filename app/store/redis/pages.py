"""Pages of the Redis store: one PAGE script per bucket group read, up to GROUPS_PER_PAGE groups."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from app.store.base import Page, StoreUnavailableError
from app.store.redis.client import LazyClient
from app.store.redis.groups import Groups, decode_fields, member
from app.store.redis.hints import GroupHints
from app.store.redis.lua import PageArgs
from app.store.redis.probe import unindexed

#: Groups one page may read: on a cluster a page may stop short (even empty) with a `next`.
GROUPS_PER_PAGE = 4


class GroupPages:
    """Reads a page group by group, skipping the groups an index never used."""

    def __init__(
        self, clients: LazyClient, groups: Groups, hints: GroupHints, run: Callable[..., Any]
    ) -> None:
        self._clients, self._groups, self._hints, self._run = clients, groups, hints, run

    def page(self, after: bytes | None, limit: int, tags: Collection[str] | None = None) -> Page:
        """A page in (group, id) order; on a single Redis (one group) that is id order."""
        indexes = ["a"] if tags is None else ["t" + tag for tag in tags]
        if not indexes:
            return Page([], None)
        group, after_id = (0, None) if after is None else self._groups.resume(after)
        used = [g for g in self._hints.used(self._clients.get(), indexes) if g >= group]
        if not used:
            return Page([], None)
        if used[0] != group:
            after_id = None
        plants: list = []
        for n, group in enumerate(used[:GROUPS_PER_PAGE]):
            more, found = self._page_of(group, after_id, limit - len(plants), indexes)
            plants += found
            if found:
                after_id = found[-1][0]
            if more:
                return Page(plants, self._groups.position(group, after_id))
            after_id = None
            if n + 1 == len(used):
                return Page(plants, None)
            if len(plants) == limit:
                break
        return Page(plants, self._groups.position(used[n + 1], None))

    def _page_of(self, group: int, after_id: int | None, limit: int, indexes: list[str]) -> tuple[bool, list]:
        start = b"" if after_id is None else member(after_id)
        groups = self._groups
        args = (*PageArgs(groups.tags[group], groups.cluster_arg, start, limit), *indexes)
        key = groups.count_key(group)
        try:
            answer = self._run("PAGE", (key,), args)
        except StoreUnavailableError as exc:
            if exc.reason != "needs_migration":
                raise
            raise unindexed(self._clients, key, exc) from None
        return answer[0] == 1, [
            (plant_id := int(answer[i]), *decode_fields(answer[i + 1], plant_id, groups))
            for i in range(1, len(answer), 2)
        ]
