"""Host names resolved for a request, in the background: no request thread waits on a name server.

`POST /webhooks` and a `PATCH` of an endpoint's `url` check the addresses of the URL's host
(addresses.py). `getaddrinfo` cannot be interrupted, and a resolver whose name server never
answers takes its timeouts times its attempts (10 s with glibc's defaults). So each lookup runs
on a thread of its own; the request that starts it waits for it only briefly
(PLANTS_WEBHOOKS_LOOKUP_WAIT, 0.2 s: a name server nearby answers well within it), and is
otherwise answered 503 with Retry-After at once while the lookup goes on. Its outcome is kept
(`TTL_S`, `FAILED_TTL_S`; at most `CACHE_SIZE` names), so the retry finds it resolved. The
bounds: one lookup in flight per client (the token, or a JWT's subject), `AT_ONCE` per process;
a client that asks for another meanwhile, or for a host under way, gets the 503 without waiting.
A URL whose host is an address, or a name already resolved, is never held behind anyone's lookup.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, NamedTuple

from app.webhooks.addresses import Resolver

#: Lookups under way at once in one process.
AT_ONCE = 8
#: How long a resolved name's addresses are used for a registration, in seconds (each delivery
#: resolves again), and a name that did not resolve is taken as such.
TTL_S = 60.0
FAILED_TTL_S = 10.0
#: Names (with their port) whose outcome is kept, at most: the oldest is forgotten first.
CACHE_SIZE = 1024


class NotResolvedInTime(Exception):
    """The host is being resolved (`busy` False), or this client's lookup or `AT_ONCE` of all
    were under way already, so none was started (`busy` True)."""

    def __init__(self, host: str, *, busy: bool) -> None:
        super().__init__(host)
        self.host = host
        self.busy = busy


class _Failed(NamedTuple):
    """A lookup's failure, kept: each request that finds it raises a new one."""

    kind: type[BaseException]
    args: tuple[Any, ...]


class Lookups:
    """The process's lookups and their kept outcomes; `for_owner` gives a client's Resolver."""

    def __init__(
        self,
        resolve: Resolver = socket.getaddrinfo,
        *,
        at_once: int = AT_ONCE,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self._resolve = resolve
        self._at_once = at_once
        self._cache_size = cache_size
        self._lock = threading.Lock()
        # (host, port, options) -> (found or the exception, until when it is used).
        self._kept: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()
        self._pending: dict[Hashable, threading.Event] = {}
        self._owners: set[Hashable] = set()

    @property
    def under_way(self) -> int:
        """How many lookups are under way."""
        return len(self._pending)

    @property
    def names_kept(self) -> int:
        """How many names' outcomes are kept (fresh or not yet forgotten)."""
        return len(self._kept)

    def for_owner(self, owner: Hashable, wait_s: float) -> Resolver:
        """`socket.getaddrinfo`'s signature, for one client: raises NotResolvedInTime rather
        than wait past `wait_s` for a lookup it starts (or at all for one under way)."""

        def resolve(host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
            return self.resolve(owner, wait_s, host, port, **kwargs)

        return resolve

    def resolve(
        self, owner: Hashable, wait_s: float, host: str, port: int, **kwargs: Any
    ) -> list[tuple[Any, ...]]:
        key = (host, port, tuple(sorted(kwargs.items())))
        with self._lock:
            kept = self._outcome(key)
            if kept is None:
                if key in self._pending:
                    raise NotResolvedInTime(host, busy=False)
                if owner in self._owners or len(self._pending) >= self._at_once:
                    raise NotResolvedInTime(host, busy=True)
                done = self._start(key, owner, host, port, kwargs)
        if kept is None:
            # Only the request that started the lookup waits, and only briefly.
            if not done.wait(wait_s):
                raise NotResolvedInTime(host, busy=False)
            with self._lock:
                kept = self._outcome(key)
            if kept is None:  # the resolver raised what is not a lookup's failure
                raise NotResolvedInTime(host, busy=False)
        if isinstance(kept, _Failed):
            raise kept.kind(*kept.args)
        found: list[tuple[Any, ...]] = kept
        return found

    def _keep(self, key: Hashable, outcome: Any, ttl: float) -> None:
        """Keep an outcome, forgetting the oldest past `cache_size`. Under the lock."""
        self._kept[key] = (outcome, time.monotonic() + ttl)
        self._kept.move_to_end(key)
        while len(self._kept) > self._cache_size:
            self._kept.popitem(last=False)

    def _outcome(self, key: Hashable) -> Any:
        """The kept outcome for `key` while it is fresh, else None. Under the lock."""
        entry = self._kept.get(key)
        if entry is None:
            return None
        if entry[1] <= time.monotonic():
            del self._kept[key]
            return None
        return entry[0]

    def _start(
        self, key: Hashable, owner: Hashable, host: str, port: int, kwargs: dict[str, Any]
    ) -> threading.Event:
        """Start the lookup of `key` on a thread of its own; the event set at its end. Under the lock."""
        done = threading.Event()

        def look_up() -> None:
            outcome: Any = None
            try:
                outcome, ttl = self._resolve(host, port, **kwargs), TTL_S
            except (OSError, UnicodeError) as exc:  # kept as what a retry raises again
                outcome, ttl = _Failed(type(exc), exc.args), FAILED_TTL_S
            finally:
                with self._lock:
                    if outcome is not None:
                        self._keep(key, outcome, ttl)
                    del self._pending[key]
                    self._owners.discard(owner)
                done.set()

        try:
            threading.Thread(target=look_up, name="webhook-url-lookup", daemon=True).start()
        except RuntimeError:  # no thread to be had
            raise NotResolvedInTime(host, busy=True) from None
        self._pending[key] = done
        self._owners.add(owner)
        return done
