"""One delivery attempt: an HTTP POST to the checked address, bounded by the timeout, redirects
not followed, the answer's body read up to a small limit and dropped."""

from __future__ import annotations

import email.utils
import http.client
import socket
import ssl
import time
from collections.abc import Iterable
from typing import NamedTuple

from app.webhooks.addresses import AddressRefused, Target, target

#: The most of a receiver's answer read (and dropped): enough to reuse nothing, bound the time.
_MOST_READ = 64 * 1024


class Outcome(NamedTuple):
    """An attempt: the receiver's HTTP status (None when there was no answer), the error
    (`timeout`, `refused`, `redirect`, `tls`, `address`, `name_not_resolved`, `connection`, or
    None), its Retry-After in seconds (None when absent), and how long it took."""

    status: int | None
    error: str | None
    retry_after: float | None
    duration_ms: int

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to the checked address, verifying the certificate of the URL's host name."""

    def __init__(self, where: Target, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(where.address, where.port, timeout=timeout, context=context)
        self._server_name = where.host
        self._ssl_context = context

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._ssl_context.wrap_socket(sock, server_hostname=self._server_name)


def send(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    allowed: Iterable[str],
    context: ssl.SSLContext | None = None,
) -> Outcome:
    """POST `body` to `url`, checking its address first (addresses.py)."""
    started = time.monotonic()

    def outcome(status: int | None, error: str | None, retry_after: float | None = None) -> Outcome:
        return Outcome(status, error, retry_after, int((time.monotonic() - started) * 1000))

    try:
        where = target(url, allowed)
    except AddressRefused as exc:
        return outcome(None, exc.reason)
    connection: http.client.HTTPConnection
    if where.https:
        connection = _PinnedHTTPS(where, timeout, context or ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(where.address, where.port, timeout=timeout)
    deadline = started + timeout
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
        status = response.status
        if 300 <= status < 400:
            return outcome(status, "redirect")
        return outcome(status, None, retry_after(response.getheader("Retry-After")))
    except TimeoutError:
        return outcome(None, "timeout")
    except ConnectionRefusedError:
        return outcome(None, "refused")
    except (ssl.SSLError, ssl.CertificateError):
        return outcome(None, "tls")
    except (OSError, http.client.HTTPException):
        return outcome(None, "connection")
    finally:
        connection.close()


def retry_after(value: str | None) -> float | None:
    """Retry-After (RFC 9110 §10.2.3) in seconds from now: delay-seconds or an HTTP-date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())
