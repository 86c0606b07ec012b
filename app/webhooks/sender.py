"""One delivery attempt: an HTTP POST to the checked address, bounded by the timeout, redirects
not followed, the answer's body read up to a small limit and dropped."""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import NamedTuple

from app.webhooks.addresses import AddressRefused, Target, target
from app.webhooks.retry_after import seconds_from_now

log = logging.getLogger(__name__)

#: The statuses whose Retry-After is read (RFC 9110 §10.2.3 and §15.5.1, §15.6.4).
BACKOFF_STATUSES = (429, 503)
#: The most of a receiver's answer read (and dropped): enough to reuse nothing, bound the time.
_MOST_READ = 64 * 1024


class Attempt(NamedTuple):
    """An attempt: the receiver's HTTP status (None when there was no answer), the error
    (`timeout`, `refused`, `redirect`, `tls`, `address`, `name_not_resolved`, `connection`,
    `internal`, or None), the Retry-After of a 429 or 503 in seconds (None when absent, invalid,
    or of another status), and how long it took."""

    status: int | None
    error: str | None
    retry_after: float | None
    duration_ms: int

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Watchdog:
    """Ends the attempts that pass their deadline. A socket timeout bounds each read, not the
    attempt: a receiver that trickles its answer a byte at a time would hold a delivery thread
    for as long as it likes. The deliverer calls `expire` every poll; it shuts such a socket down,
    and the attempt ends as a timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[float, socket.socket]] = {}
        self._expired: set[int] = set()

    def watch(self, sock: socket.socket, deadline: float) -> None:
        with self._lock:
            self._watched[id(sock)] = (deadline, sock)

    def forget(self, sock: socket.socket | None) -> bool:
        """Stop watching `sock`; whether it was ended for passing its deadline."""
        if sock is None:
            return False
        with self._lock:
            self._watched.pop(id(sock), None)
            expired = id(sock) in self._expired
            self._expired.discard(id(sock))
            return expired

    def expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            overdue = [(key, sock) for key, (deadline, sock) in self._watched.items() if deadline <= now]
            for key, _ in overdue:
                del self._watched[key]
                self._expired.add(key)
        for _, sock in overdue:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Watched(http.client.HTTPConnection):
    """HTTP to the checked address, its socket watched from the moment it connects."""

    def __init__(self, where: Target, timeout: float, deadline: float, watchdog: Watchdog | None) -> None:
        super().__init__(where.address, where.port, timeout=timeout)
        self._deadline, self._watchdog = deadline, watchdog
        self.raw_sock: socket.socket | None = None

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.raw_sock = sock
        if self._watchdog is not None:
            self._watchdog.watch(sock, self._deadline)
        return sock

    def connect(self) -> None:
        self.sock = self._open()


class _PinnedHTTPS(_Watched):
    """HTTPS to the checked address, verifying the certificate of the URL's host name."""

    def __init__(
        self,
        where: Target,
        timeout: float,
        deadline: float,
        watchdog: Watchdog | None,
        context: ssl.SSLContext,
    ) -> None:
        super().__init__(where, timeout, deadline, watchdog)
        self.default_port = 443
        self._server_name = where.host
        self._ssl_context = context

    def connect(self) -> None:
        self.sock = self._ssl_context.wrap_socket(self._open(), server_hostname=self._server_name)


def send(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    allowed: Iterable[str],
    context: ssl.SSLContext | None = None,
    watchdog: Watchdog | None = None,
) -> Attempt:
    """POST `body` to `url`, checking its address first (addresses.py); `watchdog` ends it at the
    timeout, however the receiver trickles. Never raises: whatever goes wrong is an outcome."""
    started = time.monotonic()
    try:
        return _attempt(url, body, headers, started, timeout, allowed, context, watchdog)
    except Exception as exc:
        # Raised by no documented failure: a failed attempt all the same, retried on schedule.
        # One line, no traceback: a receiver can make this happen at every attempt.
        log.warning(
            "Webhooks: the attempt to send %s failed unexpectedly (%s: %r); it counts as failed",
            headers.get("webhook-id"),
            type(exc).__name__,
            str(exc)[:200],
        )
        return Attempt(None, "internal", None, int((time.monotonic() - started) * 1000))


def _attempt(
    url: str,
    body: bytes,
    headers: dict[str, str],
    started: float,
    timeout: float,
    allowed: Iterable[str],
    context: ssl.SSLContext | None,
    watchdog: Watchdog | None,
) -> Attempt:
    def outcome(status: int | None, error: str | None, retry_after: float | None = None) -> Attempt:
        return Attempt(status, error, retry_after, int((time.monotonic() - started) * 1000))

    try:
        where = target(url, allowed)
    except AddressRefused as exc:
        return outcome(None, exc.reason)
    deadline = started + timeout
    connection: _Watched
    if where.https:
        connection = _PinnedHTTPS(where, timeout, deadline, watchdog, context or ssl.create_default_context())
    else:
        connection = _Watched(where, timeout, deadline, watchdog)
    try:
        connection.putrequest("POST", where.path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", where.authority)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        if connection.sock is not None:
            connection.sock.settimeout(max(0.001, deadline - time.monotonic()))
        response = connection.getresponse()
        read = 0
        while read < _MOST_READ and time.monotonic() < deadline:
            chunk = response.read1(_MOST_READ - read) if hasattr(response, "read1") else b""
            if not chunk:
                break
            read += len(chunk)
        if watchdog is not None and watchdog.forget(connection.raw_sock):
            return outcome(None, "timeout")  # cut off: whatever was parsed is not an answer
        status = response.status
        if 300 <= status < 400:
            return outcome(status, "redirect")
        wait = seconds_from_now(response.getheader("Retry-After")) if status in BACKOFF_STATUSES else None
        return outcome(status, None, wait)
    except TimeoutError:
        return outcome(None, "timeout")
    except ConnectionRefusedError:
        return outcome(None, "refused")
    except (ssl.SSLError, ssl.CertificateError, OSError, http.client.HTTPException) as exc:
        if watchdog is not None and watchdog.forget(connection.raw_sock):
            return outcome(None, "timeout")
        return outcome(None, "tls" if isinstance(exc, (ssl.SSLError, ssl.CertificateError)) else "connection")
    finally:
        if watchdog is not None:
            watchdog.forget(connection.raw_sock)
        connection.close()
