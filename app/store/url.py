"""The store's URL, parsed once into a `StoreUrl`: its scheme says which store, and for a cluster
its nodes. A malformed URL is a ValueError that never quotes the URL, which can hold a password."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SCHEMES = ("memory", "redis", "rediss", "unix", *CLUSTER_SCHEMES)
#: The query options a URL may carry, by scheme: a unix socket's database, TLS's certificates.
#: redis-py reads any other name as a connection option that overrides the service's own (its
#: timeouts, and so its 503s), raises a TypeError for an unknown one, and takes `?password=`,
#: which the log, showing the URL with only its user part's password hidden, would print.
_TLS_OPTIONS = frozenset(
    {"ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"}
)
#: redis-py's values of ssl_cert_reqs (their case too).
_CERT_REQS = ("none", "optional", "required")
QUERY_OPTIONS = {"unix": frozenset({"db"}), "rediss": _TLS_OPTIONS, "rediss+cluster": _TLS_OPTIONS}
#: redis-py's false values of a URL's flag (`redis.connection.to_bool`'s, read the same way here,
#: as a cluster's options are given to RedisCluster as arguments, not in a URL).
_FALSE = ("0", "F", "FALSE", "N", "NO")


@dataclass(frozen=True)
class StoreUrl:
    """`memory://`, `redis://`, `rediss://` (TLS), `unix://`, or for a Redis Cluster
    `redis+cluster://` and `rediss+cluster://` (the `limits` library's notation)."""

    #: The URL as given, password included: never for a log line (`redacted` is).
    url: str = field(repr=False)
    scheme: str
    #: A cluster's `host:port` list, and the user and password its URL gives.
    nodes: tuple[tuple[str, int], ...] = ()
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    #: A `rediss+cluster://` URL's `ssl_*` options, as RedisCluster takes them (a single Redis's
    #: URL is read by redis-py itself).
    tls_options: tuple[tuple[str, str | bool], ...] = ()

    @property
    def addresses(self) -> list[str]:
        """Each cluster node as a URL writes it: `host:port`, an IPv6 host in brackets."""
        return [f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.nodes]

    @classmethod
    def parse(cls, url: str) -> StoreUrl:
        """The URL, checked; ValueError saying what is wrong, without quoting it."""
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme in CLUSTER_SCHEMES:
            return cls(url, scheme, *_cluster_nodes(url))
        try:
            parts = urlsplit(url)
            port = parts.port  # ValueError when it is not a number in range
        except ValueError:
            raise ValueError(
                "is not a valid URL (check the port; a password holding / ? # or @ must be "
                "percent-encoded: %2F %3F %23 %40)"
            ) from None
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES:
            shown = f"{scheme!r}" if scheme.isalnum() else "missing or invalid"
            raise ValueError(
                f"has scheme {shown}; use memory://, redis://, rediss://, unix:// or redis+cluster://"
            )
        if scheme in ("redis", "rediss") and not parts.hostname:
            raise ValueError(f"names no host: use {scheme}://[user:password@]host:port/db")
        if scheme == "unix" and not parts.path:
            raise ValueError("names no socket: use unix:///path/to/redis.sock")
        if scheme == "memory" and (parts.netloc or parts.path or port):
            raise ValueError("must be just memory://")
        db = parts.path.strip("/") if scheme != "unix" else ""
        if db and not db.isdigit():
            raise ValueError("names a database that is not a number: use /0 to /15")
        _check_query(scheme, parts.query)
        return cls(url, scheme)

    @property
    def shared(self) -> bool:
        """Whether every process that uses this URL shares one store (all but memory://)."""
        return self.scheme != "memory"

    @property
    def cluster(self) -> bool:
        return self.scheme in CLUSTER_SCHEMES

    @property
    def redacted(self) -> str:
        """The URL fit for a log line: its password, if any, replaced by `***`; a user part without
        a password too, which is most often a password written without its `:`."""
        scheme, sep, rest = self.url.partition("://")
        userinfo, at, hosts = rest.rpartition("@")
        if not at:
            return self.url
        if ":" not in userinfo:
            return f"{scheme}{sep}***@{hosts}"
        return f"{scheme}{sep}{userinfo.partition(':')[0]}:***@{hosts}"


def _check_query(scheme: str, query: str) -> None:
    """ValueError for a query option the scheme does not take, naming no value (nor an unknown
    option's name, which could be a password written in the wrong place)."""
    allowed = QUERY_OPTIONS.get(scheme, frozenset())
    cluster = scheme in CLUSTER_SCHEMES
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in ("password", "username"):
            where = "host:port,host:port..." if cluster else "host:port/db"
            raise ValueError(
                f"takes no {name} in its query: write it before the host, as in "
                f"{scheme}://user:password@{where}, where the log hides the password"
            )
        if name == "db" and cluster:
            raise ValueError("names a database, and a cluster has only database 0: remove ?db=")
        if name == "db" and name not in allowed:
            raise ValueError(f"names its database in the path, not the query: {scheme}://host:port/0")
        if name not in allowed:
            takes = ", ".join(sorted(allowed)) or "none"
            raise ValueError(
                f"has a query option that {scheme}:// does not take (the options it takes: {takes}); "
                "the timeouts are PLANTS_STORE_CONNECT_TIMEOUT and PLANTS_STORE_TIMEOUT"
            )
        if name == "ssl_cert_reqs" and value not in _CERT_REQS:
            # redis-py refuses any other only as it connects: a start that answers only 503.
            raise ValueError("has an ssl_cert_reqs other than none, optional or required (lower case)")
        if name == "db" and not value.isdigit():
            raise ValueError("names a database that is not a number: use ?db=0 to ?db=15")


def _cluster_nodes(
    url: str,
) -> tuple[tuple[tuple[str, int], ...], str | None, str | None, tuple[tuple[str, str | bool], ...]]:
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    userinfo, _, hosts = rest.rpartition("@")
    query = ""
    if scheme in QUERY_OPTIONS:  # rediss+cluster: the TLS options, as rediss:// takes them
        hosts, _, query = hosts.partition("?")
        _check_query(scheme, query)
    hosts = hosts.rstrip("/")
    if "/" in hosts or "?" in hosts or "#" in hosts:
        if scheme in QUERY_OPTIONS:
            raise ValueError(
                "takes no path or options but the ssl_* ones (a cluster has only database 0): use"
                f" {scheme}://[user:password@]host:port[,host:port...][?ssl_ca_certs=...]"
            )
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
    tls = tuple(
        (name, value.upper() not in _FALSE if name == "ssl_check_hostname" else value)
        for name, value in parse_qsl(query, keep_blank_values=True)
    )
    return (
        tuple(nodes),
        unquote(user) or None,
        unquote(password) if userinfo and ":" in userinfo else None,
        tls,
    )
