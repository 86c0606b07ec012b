"""The Redis store's client: one Redis, or a Redis Cluster, from the store URL; and writes that wait
for replicas (Redis's WAIT on the write's own connection).
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import unquote

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, MovedError, NoScriptError, RedisClusterException, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from .base import StoreUnavailableError

#: Every failure a Redis call can raise (redis-py's cluster errors are not all RedisErrors).
FAILURES = (RedisError, RedisClusterException)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


def cluster_nodes(url: str) -> tuple[list[tuple[str, int]], str | None, str | None]:
    """The `host:port` list and the user and password of a cluster URL; ValueError (never quoting
    the URL) when it is malformed."""
    rest = url.split("://", 1)[1]
    userinfo, _, hosts = rest.rpartition("@")
    hosts = hosts.rstrip("/")
    if "/" in hosts or "?" in hosts or "#" in hosts:
        raise ValueError(
            "takes no path or options: use redis+cluster://[user:password@]host:port[,host:port...]"
        )
    nodes = []
    for address in hosts.split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("needs host:port for every node: redis+cluster://host:port[,host:port...]")
        nodes.append((host.strip("[]"), int(port)))
    user, _, password = userinfo.partition(":")
    return nodes, unquote(user) or None, unquote(password) if userinfo and ":" in userinfo else None


def connect(url: str, *, connect_timeout: float, timeout: float) -> redis.Redis | RedisCluster:
    """A client for the store URL: redis-py's Redis, or its RedisCluster for a cluster URL."""
    # One retry, on a broken connection only: a pooled connection that Redis closed (a restart),
    # or on a cluster a node that failed (the retry follows the refreshed slot map). Every
    # script is safe to repeat: a create that landed answers "identical", a delete "absent".
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    }
    scheme = url.split("://", 1)[0].lower()
    if scheme not in CLUSTER_SCHEMES:
        return redis.Redis.from_url(url, **options)
    nodes, user, password = cluster_nodes(url)
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes],
        username=user,
        password=password,
        ssl=scheme == "rediss+cluster",
        **options,
    )


class LazyClient:
    """The client, made on first use: a RedisCluster reads the slot map when made, and the service
    must start (and answer 503) while the cluster is down."""

    def __init__(self, url: str, *, connect_timeout: float, timeout: float) -> None:
        self.cluster = url.split("://", 1)[0].lower() in CLUSTER_SCHEMES
        self._make = lambda: connect(url, connect_timeout=connect_timeout, timeout=timeout)
        self._client: redis.Redis | RedisCluster | None = None if self.cluster else self._make()
        self._lock = threading.Lock()

    def get(self) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def run_replicated(client: Any, script: Script, keys: tuple, args: tuple, replicas: int, wait_ms: int) -> Any:
    """Run `script`, then WAIT for `replicas` on the same connection, in one round trip.

    Answers the script's answer; StoreUnavailableError("replication") when fewer replicas
    confirmed within `wait_ms`. Follows MOVED and ASK itself: a cluster routes a script by its
    keys, but WAIT has none, so the two go to the slot's node by hand.
    """
    node_client, asking = client, False
    for _ in range(5):
        if isinstance(client, RedisCluster) and not asking:
            node_client = client.get_redis_connection(client.get_node_from_key(keys[0]))
        pipe = node_client.pipeline(transaction=False)
        if asking:
            pipe.execute_command("ASKING")
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, wait_ms)
        *_, answer, confirmed = pipe.execute(raise_on_error=False)
        asking = False
        if isinstance(answer, NoScriptError):
            node_client.script_load(script.script)
        elif isinstance(answer, MovedError):
            client.nodes_manager.initialize()
        elif isinstance(answer, AskError):
            node_client = client.get_redis_connection(client.get_node(host=answer.host, port=answer.port))
            asking = True
        elif isinstance(answer, Exception):
            raise answer
        elif isinstance(confirmed, Exception):
            raise confirmed
        elif confirmed < replicas:
            raise StoreUnavailableError(
                "replication", f"Redis: {confirmed} of {replicas} replicas confirmed the write in time"
            )
        else:
            return answer
    raise StoreUnavailableError("cluster", "Redis: too many redirections")
