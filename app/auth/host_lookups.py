"""The identity provider's host name resolved, and connected to, within a fetch's deadline.

`getaddrinfo` cannot be interrupted, and a resolver whose name server never answers holds it for
its timeouts times its attempts (10 s with glibc's defaults, minutes as resolv.conf may set them):
a connection's timeout does not cover it. So a name is looked up on a thread of its own, and the
fetch waits for it only until its deadline, then fails as one that did not resolve in time. A
name whose lookup is already under way is waited for, not looked up again: however often the keys
are fetched while the name server hangs, one thread per name waits on it. An address (the host of
`http://127.0.0.1:8080`) needs no lookup, and none is started.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import time
from typing import Any

Address = tuple[Any, ...]


class LookupTimeout(TimeoutError):
    """The host name was not resolved by the fetch's deadline."""


class _Lookup:
    """One lookup under way: its end, and what it found or the failure a waiter raises anew."""

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.found: list[Address] = []
        self.failure: tuple[type[BaseException], tuple[Any, ...]] = (OSError, ("not resolved",))


_lock = threading.Lock()
_under_way: dict[tuple[str, int], _Lookup] = {}


def _forget_after_fork() -> None:
    # A lookup under way at a fork has no thread in the child: waited for, it would never end.
    global _lock
    _lock = threading.Lock()
    _under_way.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def resolve(host: str, port: int, deadline: float) -> list[Address]:
    """`getaddrinfo(host, port)` for a TCP connection, by `deadline` (time.monotonic); LookupTimeout
    past it, or the lookup's own failure (socket.gaierror, UnicodeError for a name IDNA refuses)."""
    if _is_address(host):
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    key = (host, port)
    with _lock:
        lookup = _under_way.get(key)
        if lookup is None:
            lookup = _under_way[key] = _Lookup()
            try:
                threading.Thread(
                    target=_look_up, args=(key, lookup), name="plants-jwks-lookup", daemon=True
                ).start()
            except RuntimeError:
                # No thread to be had (the process at its limits): a failed fetch, tried again later.
                del _under_way[key]
                raise OSError("no thread to resolve the host name") from None
    if not lookup.ended.wait(max(0.0, deadline - time.monotonic())):
        raise LookupTimeout
    if not lookup.found:
        kind, args = lookup.failure
        raise kind(*args)
    return lookup.found


def connect(host: str, port: int, deadline: float) -> socket.socket:
    """A socket connected to the first of `host`'s addresses that takes the connection by
    `deadline`, as socket.create_connection tries them, the lookup within the deadline too."""
    failure: OSError = OSError(f"{host} has no address")
    for family, kind, proto, _, address in resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            failure = exc
            if time.monotonic() >= deadline:
                break
            continue
        return sock
    raise failure


def _look_up(key: tuple[str, int], lookup: _Lookup) -> None:
    try:
        lookup.found = socket.getaddrinfo(*key, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        lookup.failure = (type(exc), exc.args)
    except Exception as exc:  # whatever else the resolver raises is a failed lookup, not a lost thread
        lookup.failure = (OSError, (f"{type(exc).__name__}: {exc}",))
    finally:
        with _lock:
            if _under_way.get(key) is lookup:
                del _under_way[key]
        lookup.ended.set()


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
