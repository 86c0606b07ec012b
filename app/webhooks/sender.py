"""One delivery attempt: an HTTP POST to a checked address (the first that takes the connection),
bounded by the timeout, redirects not followed, the answer's body read up to a small limit and
dropped; on the endpoint's kept-alive connection when it may be reused (keepalive.py)."""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, cast

from app.compat.http_client import FinalAnswerConnection
from app.webhooks.addresses import AddressRefused, Resolver, Target, target
from app.webhooks.keepalive import Slot
from app.webhooks.retry_after import seconds_from_now

log = logging.getLogger(__name__)

#: The statuses whose Retry-After is read (RFC 9110 §10.2.3 and §15.5.1, §15.6.4).
BACKOFF_STATUSES = (429, 503)
#: The most of a receiver's answer read (and dropped): enough to reuse nothing, bound the time.
_MOST_READ = 64 * 1024
#: Seconds an attempt may spend before its request is written (the host's resolution, the
#: connection, a TLS handshake) without its endpoint being read again: past them, an endpoint
#: deleted or disabled meanwhile is not sent to.
CONFIRM_AFTER_S = 0.05
#: The outcome's error of an attempt given up before its request was written, as its endpoint was
#: deleted or disabled meanwhile: no attempt at all, neither recorded nor counted.
WITHDRAWN = "withdrawn"


class Attempt(NamedTuple):
    """An attempt: the receiver's HTTP status (None when there was no answer), the error
    (`timeout`, `refused`, `redirect`, `tls`, `address`, `name_not_resolved`, `connection`,
    `internal`, `WITHDRAWN`, or None), the Retry-After of a 429 or 503 in seconds (None when absent, invalid,
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
    for as long as it likes. A thread of its own shuts such a socket down at its deadline, and
    the attempt ends as a timeout: not the deliverer's coordinator, whose calls to the store (a
    hung Redis) would hold the attempt past its limit by as long as the store takes to time out.
    That thread runs while attempts are watched, and ends when it wakes to find none.
    `cut` ends one thread's attempts at once, the ones it starts until `uncut` included (an
    endpoint moved under its drain)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Notified when a socket is watched: its deadline may be the earliest.
        self._watching = threading.Condition(self._lock)
        #: Each socket watched: its deadline, the socket, and the thread its attempt runs in.
        self._watched: dict[int, tuple[float, socket.socket, int]] = {}
        self._expired: set[int] = set()
        #: The threads whose attempts are cut off as they start.
        self._cut: set[int] = set()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket, deadline: float) -> None:
        """Watch `sock` until `deadline`; TimeoutError when its thread's attempts are cut off."""
        thread = threading.get_ident()
        with self._lock:
            if thread in self._cut:
                raise TimeoutError
            self._watched[id(sock)] = (deadline, sock, thread)
            # A forked process's copy of the thread is not alive: it starts its own.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="webhooks-watchdog", daemon=True)
                self._thread.start()
            self._watching.notify()

    def _run(self) -> None:
        """Shut each watched socket down at its deadline, until none is watched."""
        while True:
            with self._lock:
                if not self._watched:
                    self._thread = None
                    return
                left = min(deadline for deadline, _, _ in self._watched.values()) - time.monotonic()
                if left > 0:
                    self._watching.wait(left)
                    continue
            self.expire()

    def forget(self, sock: socket.socket | None) -> bool:
        """Stop watching `sock`; whether it was ended for passing its deadline."""
        if sock is None:
            return False
        with self._lock:
            self._watched.pop(id(sock), None)
            expired = id(sock) in self._expired
            self._expired.discard(id(sock))
            return expired

    def expire(self, now: float | None = None) -> None:
        """End the attempts past their deadline; with `now` infinite, every attempt in flight."""
        now = time.monotonic() if now is None else now
        self._end(lambda deadline, _: deadline <= now)

    def cut(self, thread: int) -> None:
        """End the attempt `thread` has in flight, and those it starts, until `uncut`."""
        with self._lock:
            self._cut.add(thread)
        self._end(lambda _, watcher: watcher == thread)

    def uncut(self, thread: int) -> None:
        with self._lock:
            self._cut.discard(thread)

    def _end(self, ends: Callable[[float, int], bool]) -> None:
        with self._lock:
            overdue = [
                (key, sock)
                for key, (deadline, sock, thread) in self._watched.items()
                if ends(deadline, thread)
            ]
            for key, _ in overdue:
                del self._watched[key]
                self._expired.add(key)
        for _, sock in overdue:
            with contextlib.suppress(OSError):
                # The socket's own shutdown, a TLS one's too: SSLSocket.shutdown would also drop
                # its TLS state under the thread that is reading it.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watched(FinalAnswerConnection):
    """HTTP to the checked address, its socket watched by the watchdog during each attempt; its
    answer the final one, past any 1xx (app/compat/http_client.py)."""

    def __init__(self, where: Target, timeout: float, watchdog: Watchdog | None) -> None:
        super().__init__(where.address, where.port, timeout=timeout)
        self._watchdog = watchdog
        #: The attempt's timeout (http.client's `timeout` may be None; this one is not).
        self.limit = timeout
        #: Every address the host resolved to, each checked, in the resolver's order.
        self.addresses = where.addresses or (where.address,)
        #: The deadline of the attempt in progress.
        self.deadline = 0.0
        self.watched: socket.socket | None = None

    def _open(self) -> socket.socket:
        """A socket connected to the first of the checked addresses that takes the connection,
        as HTTP clients do: one that refuses it, cannot be reached, or does not answer within its
        share of the time left (that time over the addresses not yet tried) is passed for the
        next, so a name with an address per server, one of them down or dropped by a firewall (an
        IPv6 one the network does not carry), is still delivered to. `host` is then that address,
        the one a kept connection is known by. Each is watched from before it connects: a stop
        that cuts attempts off (Deliverer.stop) ends one whose connection is never answered too,
        not only one whose answer is slow; a connection's timeout alone would hold the stopping
        process that long."""
        failure: OSError = OSError("no address to connect to")
        for index, address in enumerate(self.addresses):
            left = self.deadline - time.monotonic() if self.deadline else self.limit
            share = max(0.001, min(self.limit, left / (len(self.addresses) - index)))
            try:
                sock = self._connected(address, share)
            except OSError as exc:
                if self.end():  # cut off, or past the deadline, as it connected
                    raise TimeoutError from exc
                failure = exc
                continue
            self.host = address
            return sock
        raise failure

    def _connected(self, host: str, within: float) -> socket.socket:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(within)
            # Headers and body go out in two writes: without it, Nagle's algorithm holds the body
            # back for the receiver's delayed ACK of the headers, up to 40 ms on a kept connection.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._watch(sock)
            sock.connect(address)
            sock.settimeout(self.limit)
        except BaseException:
            sock.close()
            raise
        return sock

    def _watch(self, sock: socket.socket) -> None:
        self.watched = sock
        if self._watchdog is not None:
            self._watchdog.watch(sock, self.deadline)

    def connect(self) -> None:
        self.sock = self._open()

    def begin(self, deadline: float) -> None:
        """An attempt starts on this connection (new or kept): its deadline, its socket watched."""
        self.deadline = deadline
        if self.sock is not None:
            self.sock.settimeout(self.timeout)
            self._watch(self.sock)

    def end(self) -> bool:
        """The attempt is over: stop watching; whether the watchdog cut it off."""
        watched, self.watched = self.watched, None
        return self._watchdog is not None and self._watchdog.forget(watched)


class _PinnedHTTPS(_Watched):
    """HTTPS to the checked address, verifying the certificate of the URL's host name."""

    def __init__(
        self, where: Target, timeout: float, watchdog: Watchdog | None, context: ssl.SSLContext
    ) -> None:
        super().__init__(where, timeout, watchdog)
        self.default_port = 443
        # A fully qualified name's trailing dot is no part of the name a certificate holds, nor of
        # the one TLS sends (RFC 6066 §3): OpenSSL compares it as written, and refused every one.
        self._server_name = where.host.removesuffix(".")
        self._ssl_context = context

    def connect(self) -> None:
        # The handshake happens watched: the TLS socket is the one the watchdog shuts down (the
        # plain one it wraps is detached by then, so no longer watched: a watch left on it would
        # end, at its deadline, whichever socket then had its id).
        plain = self._open()
        if self.end():  # cut off as it connected
            plain.close()
            raise TimeoutError
        sock = self._ssl_context.wrap_socket(
            plain, server_hostname=self._server_name, do_handshake_on_connect=False
        )
        self.sock = sock
        self._watch(sock)
        sock.do_handshake()


def send(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    allowed: Iterable[str],
    context: ssl.SSLContext | None = None,
    watchdog: Watchdog | None = None,
    slot: Slot | None = None,
    resolve: Resolver = socket.getaddrinfo,
    still_wanted: Callable[[float], bool] | None = None,
) -> Attempt:
    """POST `body` to `url`, checking its address first (addresses.py); `watchdog` ends it at the
    timeout, however the receiver trickles. With `slot`, the endpoint's kept-alive connection is
    reused when it may be, and the connection is kept there after a 2xx (keepalive.py). When the
    connection took CONFIRM_AFTER_S or more to be ready, `still_wanted` is asked before the
    request is written (given the deadline, by which it answers), and a False gives the attempt
    up (`WITHDRAWN`). Never raises: whatever
    goes wrong is an outcome."""
    started = time.monotonic()
    try:
        return _attempt(
            url, body, headers, started, timeout, allowed, context, watchdog, slot, resolve, still_wanted
        )
    except Exception as exc:
        # Raised by no documented failure: a failed attempt all the same, retried on schedule.
        # One line, no traceback: a receiver can make this happen at every attempt.
        log.warning(
            "Webhooks: the attempt to send %s failed unexpectedly (%s: %r); it counts as failed",
            headers.get("webhook-id"),
            type(exc).__name__,
            str(exc)[:200],
        )
        if slot is not None:
            slot.close()
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
    slot: Slot | None,
    resolve: Resolver,
    still_wanted: Callable[[float], bool] | None = None,
) -> Attempt:
    def outcome(status: int | None, error: str | None, retry_after: float | None = None) -> Attempt:
        return Attempt(status, error, retry_after, int((time.monotonic() - started) * 1000))

    try:
        where = target(url, allowed, resolve)
    except AddressRefused as exc:
        if slot is not None:
            slot.close()
        return outcome(None, exc.reason)
    deadline = started + timeout
    kept = slot.take(url, where) if slot is not None else None
    reused = kept is not None
    connection = (
        cast(_Watched, kept) if kept is not None else _connection(where, timeout, watchdog, context, slot)
    )
    keep = cut = False
    try:
        connection.begin(deadline)
        if connection.sock is None:
            connection.connect()  # here rather than in the first write: it may take long
        if still_wanted is not None and time.monotonic() - started >= CONFIRM_AFTER_S:
            # The read ends by the deadline, as the attempt does, however long the store takes.
            if not still_wanted(deadline):
                return outcome(None, WITHDRAWN)
            if time.monotonic() >= deadline:
                return outcome(None, "timeout")
        try:
            _write(connection, where, headers, body)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            if not reused:
                raise
            cut = connection.end()
            if cut:
                raise
            # The kept connection failed while the request was being written, so the receiver
            # has not had all of it, and cannot have acted on it: once more, on a new one.
            connection.close()
            connection = _connection(where, timeout, watchdog, context, slot)
            connection.begin(deadline)
            _write(connection, where, headers, body)
        # From here on the receiver may have the request: a failure is a failed attempt, sent
        # again on the schedule, never at once.
        if connection.sock is not None:
            connection.sock.settimeout(max(0.001, deadline - time.monotonic()))
        response = connection.getresponse()
        read = 0
        while read < _MOST_READ and time.monotonic() < deadline:
            chunk = response.read1(_MOST_READ - read)
            if not chunk:
                break
            read += len(chunk)
        if response.length == 0:
            response.read()  # nothing left: read1 does not close an answer of no bytes, read does
        # The loop stops at the deadline too: an answer not read to its end (or to the limit) by
        # then is cut off, as the watchdog would have cut it a poll later.
        unfinished = read < _MOST_READ and not response.isclosed()
        cut = connection.end()
        if cut or unfinished:
            return outcome(None, "timeout")  # cut off: whatever was parsed is not an answer
        if read < _MOST_READ and response.length:
            # Closed before its Content-Length's bytes came: cut short, as a chunked answer whose
            # end never came is (http.client raises for that one), not an answer.
            return outcome(None, "connection")
        status = response.status
        if 300 <= status < 400:
            return outcome(status, "redirect")
        keep = 200 <= status < 300 and response.isclosed() and not response.will_close
        wait = seconds_from_now(response.getheader("Retry-After")) if status in BACKOFF_STATUSES else None
        return outcome(status, None, wait)
    except TimeoutError:
        return outcome(None, "timeout")
    except ConnectionRefusedError:
        return outcome(None, "refused")
    except (ssl.SSLError, ssl.CertificateError, OSError, http.client.HTTPException) as exc:
        if cut or connection.end():
            return outcome(None, "timeout")
        return outcome(None, "tls" if isinstance(exc, (ssl.SSLError, ssl.CertificateError)) else "connection")
    finally:
        connection.end()
        if keep and slot is not None:
            # A reused connection goes to the address it was opened to, which need not be this
            # resolution's first: the next attempt's check is against the socket's own address.
            slot.keep(url, where._replace(address=connection.host), connection)
        else:
            connection.close()


def _connection(
    where: Target,
    timeout: float,
    watchdog: Watchdog | None,
    context: ssl.SSLContext | None,
    slot: Slot | None,
) -> _Watched:
    """A new connection to `where` (it connects when the request is written)."""
    if slot is not None:
        slot.opened += 1
    if where.https:
        return _PinnedHTTPS(where, timeout, watchdog, context or ssl.create_default_context())
    return _Watched(where, timeout, watchdog)


def _write(connection: _Watched, where: Target, headers: dict[str, str], body: bytes) -> None:
    connection.putrequest("POST", where.path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", where.authority)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
