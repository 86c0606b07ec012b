"""One client connection (`Conn`), as uvicorn's `HttpToolsProtocol`: its request side (`Incoming`,
the parser's protocol, each limit checked as the bytes go by), its standing with the loop
(`Standing`), its send side (`Outgoing`) and its end other than at once (`Closing`). One thread at
a time takes a turn on it (loop.py), so a slow client holds no thread. Framing errors are a JSON
400, 413, 414, 431 or 501, then close.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httptools
from werkzeug import exceptions

from app.server.worker import cycle
from app.server.worker.tally import Refusals

#: EPOLLRDHUP: a client's close wakes its connection; what it sent before is read first.
READ = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT
WRITE = select.EPOLLOUT | select.EPOLLONESHOT
#: A parked answer's connection: woken by its client leaving, or armed WRITE by `Registry.wake`
#: (a socket with room to write is ready at once, so the next turn resumes the answer).
PARKED = select.EPOLLRDHUP | select.EPOLLONESHOT
_RECV_BYTES = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: How long, and for how many bytes, a closed connection lingers for its client to close (as
#: gunicorn's util.close_graceful, which blocks: this one waits on the epoll).
LINGER_SECONDS, LINGER_BYTES = 2.0, 65536
#: The most bytes fed to the parser at once: the limits are checked between slices.
SLICE = 16 * 1024
#: Chunk sizes, extensions and trailers a body may add to its decoded bytes, counted a slice at a
#: time: a chunk extension of any length (llhttp reads it) is refused within this and one slice.
FRAMING_ALLOWANCE = 16 * 1024
#: Where the parser is: between requests (before one's first byte), in its head, in its body.
BETWEEN, HEAD, BODY = 0, 1, 2


class RequestLimits:
    """What one request may take (gunicorn's convention: 0 is "no limit" for the first three), and
    the checks of a request's head, each raising its refusal (a Werkzeug `HTTPException`)."""

    def __init__(self, request_line: int, fields: int, field_size: int, head: int, body: int) -> None:
        self.request_line = request_line or 1 << 62
        self.fields = fields or 1 << 62
        self.field_size = field_size or 1 << 62
        self.head, self.body = head, body

    def check_request_line(self, method: bytes, url: bytes) -> None:
        """The request line, `method url HTTP/1.x` without its CRLF, counted as gunicorn counts it."""
        if len(method) + len(url) + 10 > self.request_line:
            message = f"the request line may take {self.request_line} bytes at most."
            raise exceptions.RequestURITooLarge(message)

    def check_field(self, count: int, size: int, head_bytes: int, trailer: bool) -> None:
        """A header (or `trailer`) field, the `count`th of `size` bytes, the head `head_bytes` so far."""
        kind, counted = ("trailer", "header and trailer") if trailer else ("header", "header")
        if count > self.fields:
            message = f"a request may have {self.fields} {counted} fields at most."
            raise exceptions.RequestHeaderFieldsTooLarge(message)
        if size > self.field_size:
            message = f"a {kind} field may take {self.field_size} bytes at most."
            raise exceptions.RequestHeaderFieldsTooLarge(message)
        if head_bytes > self.head:
            raise _head_too_large(self.head, ", headers and trailers" if trailer else " and headers")

    def check_head(self, request: cycle.Request, content_length: int) -> bool:
        """Whether the whole head is one this worker serves; True when its body is chunked."""
        http = request.http
        if http not in ("1.1", "1.0"):
            raise _malformed(f"HTTP/{http} is not served")
        if request.method == "CONNECT":
            raise exceptions.BadRequest("CONNECT is not served here.")
        hosts = sum(1 for name, _ in request.fields if name.lower() == b"host")
        if hosts > 1 or (hosts == 0 and http == "1.1"):  # RFC 9112 section 3.2: exactly one
            raise exceptions.BadRequest("the request needs one Host field.")
        codings = [
            coding.strip().lower()
            for name, value in request.fields
            if name.lower() == b"transfer-encoding"
            for coding in value.split(b",")
        ]
        if codings and http == "1.0":  # RFC 9112 section 6.1: HTTP/1.0 has none
            raise _malformed("Transfer-Encoding in an HTTP/1.0 request")
        if codings and codings != [b"chunked"]:  # RFC 9112 section 6.1: one not understood is a 501
            raise exceptions.NotImplemented("the only transfer coding served is chunked.")
        if content_length > self.body:
            raise _too_large(self.body)
        return bool(codings)


class RegistryInterface(Protocol):
    """What a connection asks of its worker's registry (loop.py's `Registry`); `answers_until` is
    infinite until the graceful stop sets it."""

    answers_until: float

    def rearm(self, conn: Conn, events: int, idle: bool = False, anew: bool = False) -> None: ...
    def linger(self, conn: Conn) -> None: ...
    def unpark(self, conn: Conn) -> Any: ...
    def forget(self, conn: Conn) -> None: ...


@dataclass(slots=True)
class Context:
    """What every connection of a worker shares; `step` is parking.py's `Parking.step`, `serve`
    cycle.py's `Serving.serve`."""

    registry: RegistryInterface
    step: Callable[[Conn], None]
    serve: Callable[[Conn, cycle.Request], cycle.Served | None]
    log: Any
    read_timeout: float
    limits: RequestLimits
    refusals: Refusals = field(init=False)  # the 408s to clients that stalled or left, counted

    def __post_init__(self) -> None:
        self.refusals = Refusals(self.log)


class Incoming:
    """A connection's request side, and the parser's protocol (its callbacks are the `on_` methods):
    bytes not yet parsed (parsing waits while a request is `ready`), the requests parsed whole, a
    refusal (answered once `ready` is served), and the counters of the request being read."""

    def __init__(self, limits: RequestLimits) -> None:
        self.parser, self.limits = httptools.HttpRequestParser(self), limits
        self.ready: deque[cycle.Request] = deque()
        self.refusal: exceptions.HTTPException | None = None
        self.unparsed = b""
        self.started = 0.0  # when the request being read began, and its bytes so far (displacement)
        self.received = 0
        self.wants_continue = False
        self._upgraded: cycle.Request | None = None  # whose skipped body is being read
        self.on_message_begin()
        self.phase = BETWEEN

    def on_message_begin(self) -> None:
        self.phase = HEAD
        self._request = cycle.Request()
        self._head_bytes = self._field_bytes = self._head_count = 0
        self._framing_bytes = self._body_size = self._content_length = 0
        self._body: list[bytes] = []

    @property
    def has_work(self) -> bool:
        """A request or a refusal is ready to be answered, or bytes to be parsed, without reading."""
        return bool(self.ready or self.refusal or self.unparsed)

    def buffered(self) -> int:
        held = len(self.unparsed) + self._body_size + (self._head_bytes if self.phase == HEAD else 0)
        return held + sum(len(request.body) + len(request.url) for request in self.ready)

    def discard(self) -> None:
        self.ready.clear()
        self.unparsed, self._body, self._body_size = b"", [], 0

    def feed(self, data: bytes) -> None:
        """Parse `data` after what was held back, in slices, until a request is whole; keep the rest."""
        data = self.unparsed + data if self.unparsed else data
        self.unparsed = b""
        position = 0
        while position < len(data) and not self.ready and self.refusal is None:
            piece = data[position : position + SLICE]
            position += len(piece)
            self._feed_slice(piece)
        if self.refusal is None:
            self.unparsed = data[position:]

    def _feed_slice(self, piece: bytes) -> None:
        phase_before, head_before, request_before = self.phase, self._head_bytes, self._request
        if phase_before == BETWEEN:
            self.started, self.received = time.monotonic(), 0
        switched_at: int | None = None
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade as upgrade:
            switched_at = upgrade.args[0]
        except httptools.HttpParserError as error:
            # A callback's refusal is chained onto httptools' error; another's text may quote the request.
            refused = error.__context__
            if isinstance(refused, exceptions.HTTPException):
                self.refusal = refused
            else:
                callback = isinstance(error, httptools.HttpParserCallbackError)
                self.refusal = _malformed("a field could not be read" if callback else str(error))
            return
        if switched_at is not None:
            # Outside the handler: a callback's refusal raised within it would have httptools'
            # HttpParserUpgrade, not the refusal, as its context.
            self._after_upgrade(piece[switched_at:])
            return
        self.received += len(piece)
        line_ended = self.phase == HEAD and not self._head_count and self._request.url and b"\n" in piece
        if line_ended and self.parser.get_http_version() == "0.0":
            # A request line without a version: llhttp reads the lines after it as a head, but an
            # HTTP/0.9 client sends none and waits, so it is refused as soon as its line ends.
            self.refusal = _malformed("HTTP/0.9 is not served")
            return
        # A slice read whole within one head counts whole (a head begun with it, from 0); the
        # parser's callbacks count the rest.
        if self.phase == HEAD and (phase_before == BETWEEN or self._request is request_before):
            self._head_bytes = (head_before if phase_before == HEAD else 0) + len(piece)
            if self._head_bytes > self.limits.head:
                self.refusal = _head_too_large(self.limits.head)
        elif self.phase == phase_before == BODY:
            self._framing_bytes += len(piece)
            if self._framing_bytes > self.limits.body + FRAMING_ALLOWANCE:
                framing = f"{self.limits.body} bytes and {FRAMING_ALLOWANCE} bytes of chunk sizes, extensions"
                message = f"the request body with its framing is larger than {framing} and trailers."
                self.refusal = exceptions.RequestEntityTooLarge(message)

    def _after_upgrade(self, rest: bytes) -> None:
        """llhttp stops at an Upgrade or CONNECT request. This server switches no protocol: the
        request is served as any other, and the connection then closes. httptools has llhttp skip
        its body: a new parser, given a head that frames it alike without Upgrade, reads it. llhttp
        pauses there only once the request's message is complete, so it is always `ready`."""
        request = self.ready[-1]
        request.keep_alive = False
        framing = b"Expect: 100-continue\r\n" if request.expects_continue() else b""  # owed still
        if any(name.lower() == b"transfer-encoding" for name, _ in request.fields):
            framing += b"Transfer-Encoding: chunked\r\n"  # the only coding `check_head` passes
        elif self._content_length:
            framing += b"Content-Length: %d\r\n" % self._content_length
        else:
            return  # it has no body
        self._upgraded = self.ready.pop()
        self.parser = httptools.HttpRequestParser(self)
        self._feed_slice(b"POST / HTTP/1.1\r\nHost: -\r\n%s\r\n%s" % (framing, rest))

    def on_url(self, url: bytes) -> None:
        self._request.url += url
        self.limits.check_request_line(self.parser.get_method(), self._request.url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_count += 1
        size = len(name) + len(value) + 2
        if trailer := self.phase == BODY:  # counted after the whole head (`on_headers_complete`)
            self._head_bytes += size + 2
        else:
            self._field_bytes += size + 2
        self.limits.check_field(self._head_count, size, self._head_bytes, trailer=trailer)
        if trailer:
            return  # checked as a header field is, counted as framing, not passed on
        if name.lower() == b"content-length":
            self._content_length = int(value)  # llhttp has checked that it is digits only
        # llhttp drops the optional whitespace before a value but keeps what follows it, which is
        # no part of the value either (RFC 9112 section 5): `Bearer t<TAB>` is the token t.
        self._request.fields.append((name, value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        request, parser = self._request, self.parser
        request.http = parser.get_http_version()
        request.method = parser.get_method().decode("ascii")
        request.keep_alive = parser.should_keep_alive()
        self.phase = BODY
        # The slices' count, or its fields' where a read ended inside one (each counted once).
        self._head_bytes = max(self._head_bytes, self._field_bytes)
        if self._head_bytes > self.limits.head:
            raise _head_too_large(self.limits.head)
        chunked = self.limits.check_head(request, self._content_length)
        self.wants_continue = (chunked or self._content_length > 0) and request.expects_continue()

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self.limits.body:
            raise _too_large(self.limits.body)
        self._body.append(body)

    def on_message_complete(self) -> None:
        request = self._request
        request.body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        if self._upgraded is not None:  # the body of a request that asked to upgrade
            self._upgraded.body, request, self._upgraded = request.body, self._upgraded, None
        self._body, self._body_size = [], 0  # counted in the request now (buffered())
        self.ready.append(request)
        self.phase = BETWEEN
        self.wants_continue = False


class Standing:
    """A connection's standing with the loop, a record kept by loop.py's `Registry`: the thread that
    has the connection (`busy`) writes it freely, any other only under the registry's lock (the
    graceful stop only shortens a busy one's deadline, which its thread may set again)."""

    __slots__ = (
        "budgeted", "busy", "deadline", "handing_back", "idle_since",
        "lingering", "parked", "stop_by", "woken",
    )  # fmt: skip

    def __init__(self) -> None:
        self.handing_back = threading.Lock()  # held by `Registry.rearm` till its arm has landed
        self.busy = self.lingering = self.woken = False
        self.budgeted = 0  # the bytes it held as the memory budget last counted them
        self.deadline = self.idle_since = 0.0
        # No deadline of its answer goes past this: set by the graceful stop for an answer it ended.
        self.stop_by = math.inf
        self.parked: Any = None  # an answer that waits (parking.py)


class Outgoing:
    """A connection's send side: what its client has not taken yet (`out`, then a large answer's
    rest, `body`), sent as the socket takes it. Each step says how it went (cycle.py's `DONE`,
    `WAITING`, `GONE`); `_went` acts on it."""

    __slots__ = ("_conn", "body", "close_after", "out", "started", "taken")

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self.out: memoryview | None = None
        self.body: cycle.IterBody | None = None
        self.close_after = False
        self.started = 0.0  # when the answer began, and its bytes taken so far: whom to displace
        self.taken = 0

    def begin(self) -> None:
        self.started, self.taken = time.monotonic(), 0

    def answer(self, data: bytes, keep_alive: bool, body: cycle.IterBody | None = None) -> None:
        """Send an answer (`body`: its rest, as the client takes it), then go on to the next."""
        if body is not None:
            self.body = body
            self._conn.allow(len(data) + (body.left or 0))  # the whole answer's time
        if self.send(data, close_after=not keep_alive) and (body is None or self._went(self._pump())):
            self._conn.after_answer(keep_alive)

    def send(self, data: bytes, *, close_after: bool) -> bool:
        """Send what the socket takes now; True when all of it went, else re-armed, or closed."""
        went = self.put(memoryview(data))
        if went != cycle.GONE:
            self.close_after = close_after
        if went == cycle.WAITING and self.body is None and self.out is not None:
            self._conn.allow(len(self.out))
        return self._went(went)

    def flush(self) -> None:
        """A turn for what waited for the socket, then the rest of a large answer."""
        went = self.put(self.out) if self.out is not None else cycle.DONE
        if self._went(went if went != cycle.DONE or self.body is None else self._pump()):
            self._conn.after_answer(not self.close_after)

    def _went(self, went: int) -> bool:
        if went == cycle.WAITING:
            self._conn.context.registry.rearm(self._conn, WRITE)
        elif went == cycle.GONE:
            self._conn.close()
        return went == cycle.DONE

    def put(self, view: memoryview) -> int:
        """Send what the socket takes of `view` now; the rest waits (`out`)."""
        try:
            sent = self._conn.sock.send(view) if view else 0
        except BlockingIOError:
            sent = 0
        except OSError:  # the client has gone
            return cycle.GONE
        self.taken += sent
        if sent < len(view):
            self.out = view[sent:]
            return cycle.WAITING
        self.out = None
        return cycle.DONE

    def _pump(self) -> int:
        """A turn of a large answer's rest, `SEND_QUOTA` at most."""
        body = self.body
        assert body is not None
        taken = self.taken
        # The app's error (a send's is `GONE`) is `Conn.turn`'s: the connection closes, the answer cut.
        went = body.pump(self.put, cycle.SEND_QUOTA)
        if went == cycle.DONE:
            self.body = None
            cycle.close_result(body.result, self._conn.context.log)
        elif body.left is None and self.taken > taken:
            # Of unknown length, it cannot be given its whole time at its start: each turn the
            # client takes some, it has the read timeout again (as nginx's send_timeout).
            self._conn.allow(cycle.SEND_QUOTA)
        return went


class Conn:
    """A client connection. One thread at a time takes a turn on it (its standing's `busy`); another
    only wakes a parked answer on it, under the registry's lock (`Registry.wake`)."""

    def __init__(self, sock: socket.socket, client: Any, server: Any, context: Context) -> None:
        self.sock, self.client, self.server, self.context = sock, client, server, context
        self.fd = sock.fileno()  # kept: fileno() is -1 once the socket is closed
        self.incoming = Incoming(context.limits)
        self.outgoing = Outgoing(self)
        self.standing = Standing()
        self.closing = Closing(self)
        self.environ_base: dict[str, Any] | None = None  # the environ's per-connection keys
        self.trusted_peer = False  # may set the scheme (gunicorn's forwarded_allow_ips)

    @property
    def reading_request(self) -> bool:
        """Part of a request has come, and not all of it."""
        incoming, out = self.incoming, self.outgoing
        started = incoming.phase != BETWEEN or bool(incoming.unparsed)
        return started and out.out is None and out.body is None and not self.standing.lingering

    def allow(self, size: int) -> None:
        """Its deadline: the read timeout from now, and a second per 64 KiB of `size` to move."""
        deadline = time.monotonic() + self.context.read_timeout + size / cycle.BYTES_PER_SECOND
        standing = self.standing
        standing.deadline = deadline if deadline < standing.stop_by else standing.stop_by

    def turn(self) -> None:
        try:
            if self.standing.lingering:
                self.closing.drain()
            elif self.outgoing.out is not None or self.outgoing.body is not None:
                self.outgoing.flush()
            elif self.standing.parked is not None:  # woken, or its client left
                if self.standing.woken:
                    self.context.step(self)
                else:
                    self.close()
            elif self.incoming.has_work or self._receive():
                self._answer_next()
        except Exception:
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _receive(self) -> bool:
        """Read once and parse; False when there is nothing to do (closed, or re-armed). A client
        that closed its side may still have more than one read unread: only an empty read ends
        its request, not the close's EPOLLRDHUP."""
        try:
            data = self.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            self.context.registry.rearm(self, READ)
            return False
        except OSError:
            data = b""
        if not data:  # the client closed: a request it had begun can never be whole
            self.closing.cut_short()
            return False
        incoming, idle_deadline = self.incoming, self.standing.deadline
        if incoming.phase == BETWEEN:  # a new request's first bytes: its head's deadline starts
            self.allow(0)
        had_head = incoming.phase == BODY
        incoming.feed(data)
        if incoming.phase == BETWEEN and not incoming.has_work:  # only the empty lines llhttp skips
            self.standing.deadline = idle_deadline
            self.context.registry.rearm(self, READ, idle=True)
            return False
        if incoming.phase == BODY and not had_head and not incoming.ready:
            self.allow(incoming.limits.body)
        return True

    def _answer_next(self) -> None:
        incoming = self.incoming
        if not incoming.ready and incoming.unparsed and incoming.refusal is None:
            incoming.feed(b"")  # the rest of a pipelining client's bytes
            if incoming.phase != BETWEEN:
                self.allow(0)
        if incoming.ready or incoming.refusal is not None:
            self.outgoing.begin()
        if incoming.ready:
            served = self.context.serve(self, incoming.ready.popleft())
            if served is not None:  # else a waiting answer has the connection (parking.py)
                self.outgoing.answer(*served)
        elif (refusal := incoming.refusal) is not None:
            log = self.context.log
            log.warning("Answered %s to a client: %s: %s", refusal.code, refusal.name, refusal.description)
            self.outgoing.answer(cycle.encode_refusal(refusal), keep_alive=False)
        else:
            self._await_more()

    def after_answer(self, keep_alive: bool) -> None:
        if self.standing.parked is not None:  # a stream's chunk went out: ask for the next
            self.context.step(self)
        elif not keep_alive:
            self.closing.gracefully()
        elif self.incoming.has_work:
            # Its answer was taken: the next pipelined one has its own time, not what was left of
            # this one's (the kernel may have taken this one whole, so no send re-timed it).
            self.allow(0)
            self.context.registry.rearm(self, WRITE)  # the socket is writable: back of the queue, not a spin
        else:
            self._await_more()

    def _await_more(self) -> None:
        if self.incoming.wants_continue:  # owed once after a head that asks, never between requests
            self.incoming.wants_continue = False
            with contextlib.suppress(OSError):
                self.sock.send(_CONTINUE)  # 25 bytes into an empty send buffer
        resting = self.incoming.phase == BETWEEN  # a kept-alive connection: the keep-alive time from now
        self.context.registry.rearm(self, READ, idle=resting, anew=resting)

    def close(self) -> None:
        """Close, whichever way it ends (its client left, a send failed, a deadline passed); a
        waiting answer ends too, its access line written and its watch's place given back."""
        parked = self.context.registry.unpark(self)
        if parked is not None:
            parked.abandon(self.context.log)
        # Forgotten before it is closed: once closed, its number can be reused by the next accept.
        self.context.registry.forget(self)
        with contextlib.suppress(OSError):
            self.sock.close()
        body, self.outgoing.body = self.outgoing.body, None
        if body is not None:
            cycle.close_result(body.result, self.context.log)


class Closing:
    """How a connection ends other than at once: past its deadline, or by a lingering close."""

    __slots__ = ("_conn", "lingered")

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self.lingered = 0  # bytes read and discarded while it lingers

    def time_out(self) -> None:
        conn = self._conn
        if conn.reading_request:  # too slow with its request: 408, then close as after any answer
            if math.isfinite(conn.context.registry.answers_until):
                # The graceful stop cut its time short (workers.py's `_stop`): saying the read
                # timeout passed would send an operator after a slow client that was not one.
                why = "had not sent its whole request when the worker stopped (a stop waits briefly for one)"
            else:
                why = f"did not send its whole request within {conn.context.read_timeout}s"
            self._refuse(cycle.TIMED_OUT, why)
            self.gracefully()
        else:  # idle, lingering, not taking its answer (a stream's included)
            conn.close()

    def cut_short(self) -> None:
        """Its client closed its side before its request was whole: one whose head was read is
        answered 408 first, as the service answers a body cut short under gthread."""
        if self._conn.incoming.phase == BODY:
            self._refuse(cycle.CUT_SHORT, "closed before its request's body was whole")
        self._conn.close()

    def _refuse(self, refusal: exceptions.HTTPException, why: str) -> None:
        self._conn.context.refusals.answered(refusal.code, why, time.monotonic())
        with contextlib.suppress(OSError):
            self._conn.sock.send(cycle.encode_refusal(refusal))

    def gracefully(self) -> None:
        # RFC 9112 section 9.6: send FIN, then read and discard what the client still sends until
        # it closes, so that unread request bytes cannot make the kernel reset the connection and
        # cut off the answer. The lingering happens on the epoll.
        conn = self._conn
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        conn.context.registry.linger(conn)  # no longer counted against the cap
        conn.incoming.discard()
        conn.standing.deadline = time.monotonic() + LINGER_SECONDS
        conn.context.registry.rearm(conn, READ)

    def drain(self) -> None:
        conn = self._conn
        try:
            data = conn.sock.recv(LINGER_BYTES)
        except BlockingIOError:  # woken with nothing to read: keep lingering
            conn.context.registry.rearm(conn, READ)
            return
        except OSError:
            data = b""
        self.lingered += len(data)
        if data and self.lingered < LINGER_BYTES:
            conn.context.registry.rearm(conn, READ)
        else:
            conn.close()


def _malformed(detail: str) -> exceptions.BadRequest:
    return exceptions.BadRequest(f"the request's HTTP framing is malformed ({detail}).")


def _head_too_large(limit: int, parts: str = " and headers") -> exceptions.RequestHeaderFieldsTooLarge:
    message = f"the request line{parts} may take {limit} bytes at most."
    return exceptions.RequestHeaderFieldsTooLarge(message)


def _too_large(limit: int) -> exceptions.RequestEntityTooLarge:
    return exceptions.RequestEntityTooLarge(f"the request body is larger than the limit of {limit} bytes.")
