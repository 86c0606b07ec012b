"""Host names resolved for a request thread, with a bound on both the wait and the threads.

`POST /webhooks` and a `PATCH` of an endpoint's `url` check the URL's addresses on the request
thread (addresses.py). `getaddrinfo` cannot be interrupted, and a slow resolver takes its own
timeouts times its attempts (10 s with glibc's defaults), so a client naming hosts that resolve
slowly could hold every request thread. Here each lookup runs on a thread of its own, at most
`AT_ONCE` at a time per process, and the request waits for it at most `WAIT_S`: past either, the
request is answered 503 with Retry-After (docs/webhooks.md, "The URL"), and a lookup left
running keeps its place until the resolver gives up, so the bound holds however many ask.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from app.webhooks.addresses import Resolver

#: Lookups under way at once in one process, a request's and any still running past its wait.
AT_ONCE = 4
#: How long a request waits for its lookup, in seconds.
WAIT_S = 2.0


class NotResolvedInTime(Exception):
    """The host was not resolved within the wait, or `AT_ONCE` lookups were under way already."""

    def __init__(self, host: str, *, busy: bool) -> None:
        super().__init__(host)
        self.host = host
        self.busy = busy


class BoundedResolver:
    """`socket.getaddrinfo`'s signature, raising NotResolvedInTime past the bounds."""

    def __init__(
        self, resolve: Resolver = socket.getaddrinfo, *, at_once: int = AT_ONCE, wait_s: float = WAIT_S
    ):
        self._resolve = resolve
        self._slots = threading.BoundedSemaphore(at_once)
        self._wait_s = wait_s

    def __call__(self, host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        if not self._slots.acquire(blocking=False):
            raise NotResolvedInTime(host, busy=True)
        outcome: list[Any] = []
        done = threading.Event()

        def look_up() -> None:
            try:
                outcome.append(self._resolve(host, port, **kwargs))
            except BaseException as exc:  # handed to the waiting request, which raises it
                outcome.append(exc)
            finally:
                self._slots.release()
                done.set()

        try:
            threading.Thread(target=look_up, name="webhook-url-lookup", daemon=True).start()
        except RuntimeError:  # no thread to be had: the lookup's place is not kept
            self._slots.release()
            raise NotResolvedInTime(host, busy=True) from None
        if not done.wait(self._wait_s):
            raise NotResolvedInTime(host, busy=False)
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        found: list[tuple[Any, ...]] = outcome[0]
        return found
