"""Redis's errors, translated once into the store's own (app/store/base.py), as the `limits`
library's storage classes do: `RedisBacked` wraps every public method of a subclass."""

from __future__ import annotations

import functools
import inspect
import socket
from collections.abc import Callable
from typing import Any, TypeVar

from redis.exceptions import (
    AuthenticationError,
    ClusterError,
    MovedError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.store.base import StoreFullError, StoreUnavailableError

#: Every failure a Redis call can raise (redis-py's cluster errors are not all RedisErrors).
FAILURES = (RedisError, RedisClusterException)
#: The causes of a store URL of the wrong kind, each naming the scheme to use.
CLUSTER_NODE_AS_PLAIN = (
    "it is a node of a Redis Cluster, which serves only its own slots: set PLANTS_STORE_URL to"
    " redis+cluster://host:port (rediss+cluster:// for TLS)"
)
PLAIN_AS_CLUSTER = (
    "it is a Redis without cluster mode (Redis: cluster_enabled:0): set PLANTS_STORE_URL to"
    " redis://host:port/db (rediss:// for TLS)"
)
#: The most of a message of Redis's own that the log repeats.
_MESSAGE_MAX = 200
_Method = TypeVar("_Method", bound=Callable[..., Any])


def translated(method: _Method) -> _Method:
    """`method`, raising StoreFullError and StoreUnavailableError instead of Redis's errors."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except FAILURES as exc:
            raise translate(exc) from None

    return call  # type: ignore[return-value]


def translate(exc: Exception, node: str | None = None) -> StoreFullError | StoreUnavailableError:
    """The store's error for a Redis failure; `node`: the cluster's node that failed, if known."""
    if isinstance(exc, OutOfMemoryError):
        # maxmemory reached with noeviction: Redis refuses every write.
        return StoreFullError()
    error = unavailable(exc)
    error.node = node
    return error


class RedisBacked:
    """A class whose public methods (and `len()`) never raise a Redis error: each is `translated`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if inspect.isfunction(value) and (not name.startswith("_") or name == "__len__"):
                setattr(cls, name, translated(value))


def unavailable(exc: Exception) -> StoreUnavailableError:
    """The store's error for a Redis failure: its reason, and its cause in words, for the log.

    The cause is read from the exception's class and the socket error under it, never from
    redis-py's message, so no URL or password can reach the log; an error Redis itself answered
    (`-ERR DB index is out of range`) is repeated, as it holds neither.
    """
    if isinstance(exc, RedisClusterException) and "Cluster mode is not enabled" in str(exc):
        return StoreUnavailableError("wrong_kind", PLAIN_AS_CLUSTER)
    if isinstance(exc, MovedError):
        return StoreUnavailableError("wrong_kind", f"{CLUSTER_NODE_AS_PLAIN} (Redis: MOVED)")
    if isinstance(exc, ResponseError) and str(exc).startswith("NEEDSMIGRATION"):
        return StoreUnavailableError(
            "needs_migration",
            "Redis holds plants stored by 1.0.0 without the indexes that pages need: "
            "run `python -m app.store.migrate` once",
        )
    if isinstance(exc, ResponseError) and "DB index is out of range" in str(exc):
        # SELECT, as the connection opens: the URL names a database the server does not have.
        return StoreUnavailableError(
            "wrong_db",
            "its database index is past the server's count (Redis: DB index is out of range): use one"
            " from 0 to the server's `databases` less one (0 to 15 by default)",
        )
    if isinstance(exc, ResponseError) and str(exc).startswith("UNREADABLE"):
        # A write's own refusal (`readable` in scripts/library.lua): it wrote nothing.
        return StoreUnavailableError("unreadable", str(exc).removeprefix("UNREADABLE "))
    if isinstance(exc, ResponseError) and str(exc).startswith("LATE"):
        # A write's own refusal (deadline.py): it reached Redis too late, and did nothing.
        return StoreUnavailableError("timeout", "the write reached Redis after its deadline (Redis: LATE)")
    if isinstance(exc, AuthenticationError):
        reason, cause = "auth", "authentication failed (check the user and password in the URL)"
    elif isinstance(exc, RedisTimeoutError) or _socket_error(exc, TimeoutError):
        reason, cause = "timeout", "timed out"
    elif isinstance(exc, RedisConnectionError):
        if _socket_error(exc, socket.gaierror):
            reason, cause = "name_not_resolved", "the host name did not resolve"
        elif _socket_error(exc, ConnectionRefusedError):
            reason, cause = "refused", "connection refused (is Redis running on that port?)"
        else:
            reason, cause = "connection", "the connection failed or was lost"
    elif isinstance(exc, ReadOnlyError):
        reason, cause = "read_only", "it is a read-only replica"
    elif isinstance(exc, RedisClusterException):
        reason, cause = "cluster", "no node given in the URL answered with the cluster's slot map"
    elif isinstance(exc, (ClusterError, TryAgainError)):
        # The cluster is failing over, or a slot is moving, or no node serves the slot.
        reason, cause = "cluster", "the cluster is failing over or moving a slot"
    else:
        reason, cause = "other", "it answered with an error"
    return StoreUnavailableError(reason, f"{cause} (Redis: {_redis_said(exc)})")


def _redis_said(exc: Exception) -> str:
    """The error's class, and for an error that Redis answered, its message (no URL in it)."""
    if not isinstance(exc, ResponseError) or not str(exc):
        return type(exc).__name__
    message = str(exc)
    return f"{type(exc).__name__}: {message[:_MESSAGE_MAX]}{'…' if len(message) > _MESSAGE_MAX else ''}"


def settled(exc: BaseException) -> bool:
    """Whether a failed call certainly had no effect and never will: nothing listens at the
    address, or the name did not resolve. After a timeout or a lost connection, a command
    may have been sent, and may still be on its way."""
    return _socket_error(exc, ConnectionRefusedError) or _socket_error(exc, socket.gaierror)


def _socket_error(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether a `kind` error lies under `exc` (redis-py raises its own from the socket's)."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
