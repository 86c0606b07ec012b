"""The identity provider's documents over HTTP: its discovery document and its JWKS, each exchange
within one deadline, the reason a fetch failed in words, and how long its answer may be kept.

Every fetch has one deadline of 2 s for the whole exchange, the host name's lookup and the TLS
handshake included (host_lookups.py), not per read; at most 1 MiB, a `200` and a JSON object;
redirects are not followed.

A socket's timeout bounds one read, and http.client reads a status line, a header or a chunk's
size in as many reads as it takes: a provider that trickles them a byte at a time would hold a
fetch (and the request that made it, and every refresh of the keys) for as long as it likes. So a
fetch's connection is also shut at its deadline, whatever is reading it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from app.auth import host_lookups

FETCH_TIMEOUT = 2.0
DEFAULT_MAX_AGE = 600.0
MIN_MAX_AGE, MAX_MAX_AGE = 60.0, 86400.0
MAX_DOCUMENT_BYTES = 1 << 20
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)", re.IGNORECASE)


class FetchError(Exception):
    """The provider did not give a usable document; the message never holds a secret."""


def _scheme(url: str) -> str:
    """A discovery document's `jwks_uri`'s scheme. It is the provider's text: one urlsplit refuses
    (`http://[::1/`, a bracketed host that is no address) is a failed fetch like any other, never
    an error that would end the background loader."""
    try:
        return urlsplit(url).scheme
    except ValueError:
        raise FetchError(f"{cut(url)} is not a URL this service can fetch (ValueError)") from None


def fetch_jwks(discovery_url: str, jwks_url: str | None, issuer: str) -> tuple[dict[str, Any], float, str]:
    """The JWKS document, its max-age and the URL it came from: `jwks_url`, or without one the
    `jwks_uri` of the discovery document, whose `issuer` must be `issuer` (OpenID Connect
    Discovery §4.3). FetchError when either fetch fails, within one FETCH_TIMEOUT for both."""
    deadline = time.monotonic() + FETCH_TIMEOUT
    if jwks_url is None:
        discovery, _ = fetch_json(discovery_url, deadline)
        named = discovery.get("issuer")
        if named != issuer:
            raise FetchError(_another_issuer(discovery_url, issuer, named))
        jwks_url = discovery.get("jwks_uri")
        if not isinstance(jwks_url, str) or _scheme(jwks_url) not in ("https", "http"):
            raise FetchError(f"the discovery document at {discovery_url} has no jwks_uri")
    document, max_age = fetch_json(jwks_url, deadline)
    return document, max_age, jwks_url


def fetch_json(url: str, deadline: float) -> tuple[dict[str, Any], float]:
    """GET a JSON object; with its max-age in seconds (Cache-Control, clamped), within `deadline`."""
    parts = urlsplit(url)
    # The jwks_uri is the provider's text, up to the document's size: a line a fetch, cut short.
    shown = cut(url)
    remaining = max(0.01, deadline - time.monotonic())
    try:
        connection = _connection(parts.scheme, parts.hostname or "", parts.port, deadline)
    except (ValueError, http.client.InvalidURL) as exc:
        # A discovery document's jwks_uri is the provider's text: a port out of range or not a
        # number (ValueError), or a host with a space (InvalidURL), is a failed fetch like any other.
        raise FetchError(f"{shown} is not a URL this service can fetch ({type(exc).__name__})") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    cutoff = _Cutoff(connection, remaining, shown)
    try:
        connection.request("GET", target, headers={"Accept": "application/json"})
        _bound(connection, deadline)
        response = connection.getresponse()
        body = bytearray()
        while len(body) <= MAX_DOCUMENT_BYTES:
            _bound(connection, deadline)
            chunk = response.read1(65536)
            if not chunk:
                break
            body += chunk
        cutoff.check()
    except (OSError, http.client.HTTPException, UnicodeError) as exc:
        if not isinstance(exc, host_lookups.LookupTimeout):  # the cutoff fired at the same deadline
            cutoff.check()
        raise FetchError(f"{shown} {_failure(exc)} ({type(exc).__name__})") from None
    finally:
        cutoff.cancel()
        connection.close()
    if response.status != 200:
        raise FetchError(f"{shown} answered {response.status}")
    if len(body) > MAX_DOCUMENT_BYTES:
        raise FetchError(f"{shown} answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        # Nesting deeper than the interpreter's recursion limit is a RecursionError, not a
        # ValueError: left out, it would end the background loader for good.
        raise FetchError(f"{shown} did not answer JSON") from None
    if not isinstance(document, dict):
        raise FetchError(f"{shown} did not answer a JSON object")
    return document, _max_age(response.getheader("Cache-Control"))


class _Cutoff:
    """Shuts a connection at its fetch's deadline: a read it interrupts ends (an error, or what
    looks like the answer's end), and `check` then tells the fetch it ran out of time."""

    def __init__(self, connection: http.client.HTTPConnection, seconds: float, shown: str) -> None:
        self._connection, self._shown = connection, shown
        self._fired = threading.Event()
        self._timer = threading.Timer(seconds, self._shut)
        self._timer.daemon = True
        try:
            self._timer.start()
        except RuntimeError:
            # No thread to be had (the process at its limits): a failed fetch, tried again later.
            connection.close()
            raise FetchError(f"{shown} could not be fetched: no thread to bound it (RuntimeError)") from None

    def _shut(self) -> None:
        self._fired.set()
        sock = self._connection.sock
        if sock is not None:
            # The socket's own shutdown, under TLS too: it leaves the TLS state to the reader,
            # whose read it ends. A socket closed meanwhile has nothing left to end.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def check(self) -> None:
        """FetchError when the deadline shut the connection: what was read may be cut short."""
        if self._fired.is_set():
            raise FetchError(f"{self._shown} did not answer in time (TimeoutError)")

    def cancel(self) -> None:
        self._timer.cancel()


def cut(url: str) -> str:
    """A URL as a log line shows it: its first 200 characters."""
    return url if len(url) <= 200 else url[:200] + "..."


def _connection(scheme: str, host: str, port: int | None, deadline: float) -> http.client.HTTPConnection:
    remaining = max(0.01, deadline - time.monotonic())
    if scheme == "https":
        return _TlsConnection(host, port, deadline, remaining)
    return _Connection(host, port, timeout=remaining, deadline=deadline)


class _Connection(http.client.HTTPConnection):
    """Connects by the fetch's deadline, the host name's lookup included (host_lookups.py)."""

    def __init__(self, host: str, port: int | None, *, timeout: float, deadline: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.deadline = deadline

    def connect(self) -> None:
        self.sock = host_lookups.connect(self.host, self.port, self.deadline)


class _TlsConnection(http.client.HTTPSConnection):
    """HTTPS, connected as `_Connection` is; the handshake on the socket the deadline shuts."""

    def __init__(self, host: str, port: int | None, deadline: float, timeout: float) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.deadline = deadline

    def connect(self) -> None:
        plain = host_lookups.connect(self.host, self.port, self.deadline)
        # Wrapped first, shaken hands after, on the socket `_Cutoff` shuts at the deadline (the
        # plain one is detached as it is wrapped): the handshake ends by the deadline, not by its
        # own timeout counted from before the lookup and the connection.
        self.sock = self.tls.wrap_socket(plain, server_hostname=self.host, do_handshake_on_connect=False)
        self.sock.do_handshake()


def _failure(exc: BaseException) -> str:
    """What went wrong with a fetch, in words: a refused connection is not a slow provider."""
    if isinstance(exc, ConnectionRefusedError):
        return "refused the connection (is the provider running at that address?)"
    if isinstance(exc, host_lookups.LookupTimeout):
        return "has a host name that did not resolve in time"
    if isinstance(exc, socket.gaierror):
        return "has a host name that did not resolve"
    if isinstance(exc, UnicodeError):
        return "has a host name that is not a valid DNS name"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "has a TLS certificate this service does not trust (a private CA: set SSL_CERT_FILE)"
    if isinstance(exc, TimeoutError):
        return "did not answer in time"
    return "failed before its answer was complete"


def _bound(connection: http.client.HTTPConnection, deadline: float) -> None:
    """The reads that follow get at most what is left of the deadline (a read that loops, as a
    header line's does, is ended by `_Cutoff` instead)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    if connection.sock is not None:
        connection.sock.settimeout(remaining)


def _max_age(cache_control: str | None) -> float:
    """How long to keep a JWKS: its max-age within 1 minute and 1 day; no-cache is the minute."""
    cache_control = cache_control or ""
    if re.search(r"no-(?:cache|store)", cache_control, re.IGNORECASE):
        return MIN_MAX_AGE
    match = _MAX_AGE.search(cache_control)
    if match is None:
        return DEFAULT_MAX_AGE
    return min(max(float(match.group(1)), MIN_MAX_AGE), MAX_MAX_AGE)


def _another_issuer(discovery_url: str, configured: str, named: Any) -> str:
    """Both issuers, as written (the provider's cut short: it is what a stranger's server says)."""
    shown = repr(named)[:200]
    hint = ""
    if isinstance(named, str) and named.rstrip("/") == configured.rstrip("/"):
        hint = ": they must be equal character for character, trailing slash included"
    return (
        f"the discovery document at {discovery_url} names the issuer {shown}, not PLANTS_JWT_ISSUER"
        f" {configured!r}{hint}"
    )
