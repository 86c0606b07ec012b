"""One client connection (`Conn`), as uvicorn's `HttpToolsProtocol`: the parser's protocol (llhttp's
callbacks are its methods), its limits, and the turns a request thread takes on it (loop.py hands
a ready connection to one thread, `EPOLLONESHOT`). A turn reads once and feeds the parser in
slices, checking the limits between them; parsing stops while a whole request waits, so a
pipelining client's bytes wait in its socket. A whole request is served in the thread (cycle.py);
more buffered, the connection is re-armed for writing, behind every other ready one. A slow client
holds no thread, only its bytes and its deadline. Framing errors are a JSON 400, 413, 414, 431 or
501, then close; the message never quotes the request.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from select import EPOLLRDHUP
from typing import Any

import httptools

from app.server.worker.cycle import BYTES_PER_SECOND, TIMED_OUT, Outgoing, Refusal, Request, encode_refusal

#: EPOLLRDHUP: a client that closed after part of a request is closed in the same turn.
READ = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT
WRITE = select.EPOLLOUT | select.EPOLLONESHOT
#: A parked answer's connection: woken by its client leaving, or armed WAKE by its `wake` (a
#: socket with room to write is ready at once, so the next turn resumes the answer).
PARKED = select.EPOLLRDHUP | select.EPOLLONESHOT
WAKE = WRITE
_RECV_BYTES = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: How long, and for how many bytes, a closed connection lingers for its client to close (as
#: gunicorn's util.close_graceful, which blocks: this one waits on the epoll).
LINGER_SECONDS, LINGER_BYTES = 2.0, 65536
#: The most bytes fed to the parser at once: the limits are checked between slices.
SLICE = 16 * 1024
#: Chunk sizes, extensions and trailers a body may add on top of its decoded bytes.
FRAMING_ALLOWANCE = 16 * 1024
#: A chunk's size line with its extensions: llhttp reads extensions of any length; none is read here.
MAX_SIZE_LINE = 16 * 1024
IDLE, HEAD, BODY = 0, 1, 2


class Limits:
    """What one request may take; gunicorn's convention: 0 is "no limit" for the first three."""

    def __init__(self, request_line: int, fields: int, field_size: int, head: int, body: int) -> None:
        self.request_line = request_line or 1 << 62
        self.fields = fields or 1 << 62
        self.field_size = field_size or 1 << 62
        self.head, self.body = head, body


@dataclass(slots=True)
class Context:
    """What every connection of a worker shares: its registry (loop.py), parking, the app's call
    (cycle.py's `Serving.serve`), log and settings."""

    registry: Any
    parking: Any
    serve: Callable[..., Any]
    log: Any
    read_timeout: float
    limits: Limits


class Incoming:
    """A connection's request side: bytes read and not yet parsed (`unparsed`: parsing waits while
    a request is ready), the requests parsed whole (`ready`), a refusal (answered once `ready` is
    served, then close), and the framing counters of the request being read, checked against the
    limits. The parser's callbacks land on `Conn`, which hands them on here."""

    _body: list[bytes]
    _size_line: int | None  # a chunk's size line being read: its bytes so far

    def __init__(self, parser: httptools.HttpRequestParser, limits: Limits) -> None:
        self.parser, self.limits = parser, limits
        self.ready: deque[Request] = deque()
        self.refusal: Refusal | None = None
        self.unparsed = b""
        self.started = 0.0  # when the request being read began, and its bytes so far (displacement)
        self.received = 0
        self.wants_continue = False
        self.on_message_begin()
        self.phase = IDLE

    @property
    def has_work(self) -> bool:
        """A request (or a refusal) is ready to be answered without reading more."""
        return bool(self.ready or self.refusal or self.unparsed)

    def held(self) -> int:
        held = len(self.unparsed) + self._body_size + (self._head_bytes if self.phase == HEAD else 0)
        return held + sum(len(request.body) + len(request.url) for request in self.ready)

    def forget(self) -> None:
        """Every request byte read is forgotten (the connection is closing)."""
        self.ready.clear()
        self.unparsed, self._body, self._body_size = b"", [], 0

    def take_continue(self) -> bool:
        """Whether the client waits for a 100 Continue before its body; it is owed once."""
        wants, self.wants_continue = self.wants_continue, False
        return wants

    def feed(self, data: bytes) -> None:
        """Parse `data` (and what was held back) until a request is whole, in slices (the limits
        are checked between them); keep the rest."""
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
        phase_before = self.phase
        if phase_before == IDLE:
            self.started, self.received = time.monotonic(), 0
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            # llhttp stops at an Upgrade or CONNECT request. This server switches no protocol:
            # the request is served as any other, and the connection then closes.
            if self.ready:
                self.ready[-1].keep_alive = False
            else:
                self.refusal = Refusal(400, "Bad Request", "This server does not switch protocols.")
            return
        except httptools.HttpParserCallbackError:
            # A callback's refusal, or (never expected) its error, whose text may quote the request.
            self.refusal = self.refusal or _malformed("a field could not be read")
            return
        except httptools.HttpParserError as exc:
            self.refusal = self.refusal or _malformed(str(exc))
            return
        self.received += len(piece)
        # A slice read whole within one phase counts whole; the parser's callbacks count the rest.
        if self.phase == phase_before == HEAD:
            self._head_bytes += len(piece)
            if self._head_bytes > self.limits.head:
                self.refusal = _head_too_large(self.limits.head)
        elif self.phase == phase_before == BODY:
            self._framing_bytes += len(piece)
            if self._framing_bytes > self.limits.body + FRAMING_ALLOWANCE:
                self.refusal = _too_large(self.limits.body)
        if self._size_line is not None and self.phase == BODY:
            # A size line holds no LF: it began after the last LF of this slice, if it has one.
            line_feed = piece.rfind(b"\n")
            self._size_line = len(piece) - line_feed - 1 if line_feed >= 0 else self._size_line + len(piece)
            if self._size_line > MAX_SIZE_LINE:
                detail = f"a chunk's size and extensions may take {MAX_SIZE_LINE} bytes at most"
                self.refusal = self.refusal or _malformed(detail)

    def _refuse(self, refusal: Refusal) -> Refusal:
        """Record the refusal (raising it from a callback stops the parser where it is)."""
        self.refusal = refusal
        return refusal

    def on_message_begin(self) -> None:
        self.phase = HEAD
        self._request = Request()
        self._head_bytes = self._head_count = self._framing_bytes = self._body_size = self._content_length = 0
        self._body = []
        self._size_line = None

    def on_url(self, url: bytes) -> None:
        self._request.url += url
        if len(self._request.url) > self.limits.request_line:
            message = f"URI Too Long: the request line may take {self.limits.request_line} bytes at most."
            raise self._refuse(Refusal(414, "URI Too Long", message))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_count += 1
        size = len(name) + len(value) + 2
        self._head_bytes += size + 2
        limits = self.limits
        if self._head_count > limits.fields:
            raise self._refuse(_fields_refusal(f"a request may have {limits.fields} header fields at most"))
        if size > limits.field_size:
            raise self._refuse(_fields_refusal(f"a header field may take {limits.field_size} bytes at most"))
        if self._head_bytes > limits.head:
            raise self._refuse(_head_too_large(limits.head))
        if self.phase == BODY:
            return  # a trailer field: framing, counted against the body, not passed on
        if name.lower() == b"content-length":
            self._content_length = int(value)  # llhttp has checked that it is digits only
        self._request.fields.append((name, value))

    def on_headers_complete(self) -> None:
        request, parser = self._request, self.parser
        request.http = parser.get_http_version()
        request.method = parser.get_method().decode("ascii")
        request.keep_alive = parser.should_keep_alive()
        self.phase = BODY
        refusal, transfer_coded = _head_refusal(request, self._content_length, self.limits)
        if refusal is not None:
            raise self._refuse(refusal)
        if transfer_coded:
            self._size_line = 0
        self.wants_continue = (
            request.http == "1.1"
            and (transfer_coded or self._content_length > 0)
            and any(
                name.lower() == b"expect" and value.lower() == b"100-continue"
                for name, value in request.fields
            )
        )

    def on_chunk(self, data_follows: bool) -> None:
        """A chunk's data follows (its size line is read), or the next chunk's size line does."""
        self._size_line = None if data_follows else 0

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self.limits.body:
            raise self._refuse(_too_large(self.limits.body))
        self._body.append(body)

    def on_message_complete(self) -> None:
        request = self._request
        request.body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body, self._body_size = [], 0  # counted in the request now (held())
        self.ready.append(request)
        self.phase = IDLE
        self.wants_continue = False
        self._size_line = None


class Standing:
    """A connection's standing with the worker, changed through these methods only: whether a
    thread has it (`busy`), its deadline, since when it rests, whether it lingers, its waiting
    answer and whether that was woken, and what the memory budget last counted for it (`held`).
    The thread that has the connection (`busy`) changes it freely; any other, the loop's expiry
    and the graceful stop, only with the registry's lock held, and a deadline it sets on a busy
    connection only shortens it (the thread's next `rearm_idle` applies the stop's too)."""

    __slots__ = ("busy", "deadline", "held", "idle_since", "lingering", "parked", "woken")

    def __init__(self) -> None:
        self.busy = self.lingering = self.woken = False
        self.held = 0
        self.deadline = self.idle_since = 0.0
        self.parked: Any = None  # an answer that waits (parking.py)

    def take(self) -> bool:
        """Taken up by a thread for a turn; False when another thread has it."""
        if self.busy:
            return False
        self.busy = True
        return True

    def hand_back(self) -> None:
        self.busy = False

    def due_by(self, deadline: float, sooner_only: bool = False) -> None:
        self.deadline = min(self.deadline, deadline) if sooner_only else deadline

    def rests_since(self, now: float) -> None:
        self.idle_since = now

    def start_lingering(self) -> None:
        self.lingering = True

    def recount(self, held: int) -> int:
        """Count what it holds now; the change since it was last counted."""
        change, self.held = held - self.held, held
        return change

    def park(self, parked: Any) -> Any:
        """Its answer waits (`parked`); None: taken off it. The answer it had."""
        before, self.parked = self.parked, parked
        return before

    def mark_woken(self, woken: bool = True) -> None:
        self.woken = woken


class Conn:
    """A client connection. Exactly one thread acts on it at a time (its standing's `busy`)."""

    def __init__(self, sock: socket.socket, client: Any, server: Any, context: Context) -> None:
        self.sock, self.client, self.server, self.context = sock, client, server, context
        self.fd = sock.fileno()  # kept: fileno() is -1 once the socket is closed
        self.parser = httptools.HttpRequestParser(self)
        self.incoming = Incoming(self.parser, context.limits)
        self.outgoing = Outgoing(self)
        self.standing = Standing()
        self.lingered = 0  # bytes read and discarded while it lingers
        self.environ_base: dict[str, Any] | None = None  # the environ's per-connection keys
        self.trusted_peer = False  # may set the scheme (gunicorn's forwarded_allow_ips)

    def keep_environ(self, base: dict[str, Any], trusted_peer: bool) -> None:
        self.environ_base, self.trusted_peer = base, trusted_peer

    @property
    def reading_request(self) -> bool:
        """Part of a request has come, and not all of it."""
        incoming, out = self.incoming, self.outgoing
        started = incoming.phase != IDLE or bool(incoming.unparsed)
        return started and out.out is None and out.body is None and not self.standing.lingering

    # --- a turn ---

    def turn(self, mask: int) -> None:
        """One turn, on a connection this thread has taken (loop.py's `Registry.take`)."""
        try:
            if self.standing.lingering:
                self._drain()
            elif self.outgoing.out is not None or self.outgoing.body is not None:
                self.outgoing.flush()
            elif self.standing.parked is not None:
                self.context.parking.resume(self)
            elif self.incoming.has_work or self._receive(mask & EPOLLRDHUP):
                self._answer_next()
        except Exception:
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _receive(self, closed: int) -> bool:
        """Read once and parse; False when there is nothing to do (closed, or re-armed).
        `closed`: the client has closed its side, so what it sent is all there will be."""
        try:
            data = self.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            self.context.registry.rearm(self, READ)
            return False
        except OSError:
            data = b""
        if not data:  # the client closed: a request it had begun can never be whole
            self.close()
            return False
        incoming, now, idle_deadline = self.incoming, time.monotonic(), self.standing.deadline
        if incoming.phase == IDLE:  # a new request's first bytes: its head's deadline starts
            self.standing.due_by(now + self.context.read_timeout)
        had_head = incoming.phase == BODY
        incoming.feed(data)
        if incoming.phase == IDLE and not incoming.has_work:  # only the empty lines llhttp skips
            self.standing.due_by(idle_deadline)
            self.context.registry.rest_idle(self)
            return False
        if closed and not incoming.has_work:
            self.close()
            return False
        if incoming.phase == BODY and not had_head and not incoming.ready:
            self.standing.due_by(now + self.context.read_timeout + incoming.limits.body / BYTES_PER_SECOND)
        return True

    def _answer_next(self) -> None:
        incoming = self.incoming
        if not incoming.ready and incoming.unparsed and incoming.refusal is None:
            incoming.feed(b"")  # the rest of a pipelining client's bytes
            if incoming.phase != IDLE:
                self.standing.due_by(time.monotonic() + self.context.read_timeout)
        if incoming.ready or incoming.refusal is not None:
            self.outgoing.started, self.outgoing.sent = time.monotonic(), 0
        if incoming.ready:
            served = self.context.serve(self, incoming.ready.popleft())
            if served is not None:  # else a waiting answer has the connection (parking.py)
                self.outgoing.answer(*served)
        elif incoming.refusal is not None:
            refusal = incoming.refusal
            self.context.log.warning("Answered %s to a client: %s", refusal.status, refusal.message)
            self.outgoing.answer(encode_refusal(refusal), keep_alive=False)
        else:
            self._await_more()

    # --- after an answer (cycle.py's `Outgoing` sends it) ---

    def after_answer(self, keep_alive: bool) -> None:
        if self.standing.parked is not None:  # a stream's chunk went out: ask for the next
            self.context.parking.step(self)
        elif not keep_alive:
            self.close_gracefully()
        elif self.incoming.has_work:
            self.context.registry.rearm(self, WRITE)  # the socket is writable: back of the queue, not a spin
        else:
            self._await_more()

    def _await_more(self) -> None:
        if self.incoming.phase == IDLE:
            self.context.registry.rearm_idle(self)
            return
        if self.incoming.take_continue():
            with contextlib.suppress(OSError):
                self.sock.send(_CONTINUE)  # 25 bytes into an empty send buffer
        self.context.registry.rearm(self, READ)

    def wait_writable(self) -> None:
        self.context.registry.rearm(self, WRITE)

    # --- ending ---

    def time_out(self) -> None:
        """Past its deadline (run by the main thread, which has taken it)."""
        if self.reading_request:  # too slow with its request: 408, then close as after any answer
            message = "Answered 408 to a client that did not send its whole request within %ss"
            self.context.log.warning(message, self.context.read_timeout)
            with contextlib.suppress(OSError):
                self.sock.send(encode_refusal(TIMED_OUT))
            self.close_gracefully()
        else:  # idle, lingering, not taking its answer (a stream's included)
            self.close()

    def close_gracefully(self) -> None:
        # RFC 9112 section 9.6: send FIN, then read and discard what the client still sends until
        # it closes, so that unread request bytes cannot make the kernel reset the connection and
        # cut off the answer. The lingering happens on the epoll.
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()
            return
        self.context.registry.linger(self)  # no longer counted against the cap
        self.incoming.forget()
        self.standing.due_by(time.monotonic() + LINGER_SECONDS)
        self.context.registry.rearm(self, READ)

    def _drain(self) -> None:
        try:
            data = self.sock.recv(LINGER_BYTES)
        except BlockingIOError:  # woken with nothing to read: keep lingering
            self.context.registry.rearm(self, READ)
            return
        except OSError:
            data = b""
        self.lingered += len(data)
        if data and self.lingered < LINGER_BYTES:
            self.context.registry.rearm(self, READ)
        else:
            self.close()

    def close(self) -> None:
        """Close, whichever way it ends (its client left, a send failed, a deadline passed); a
        waiting answer ends too, its access line written and its watch's place given back."""
        parked = self.context.registry.unpark(self)
        if parked is not None:
            parked.left(self.context.log)
        # Forgotten before it is closed: once closed, its number can be reused by the next accept.
        self.context.registry.forget(self)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.outgoing.drop()

    # --- the parser's callbacks (llhttp's protocol, as uvicorn's), its request side counts them ---

    def on_message_begin(self) -> None:
        self.incoming.on_message_begin()

    def on_url(self, url: bytes) -> None:
        self.incoming.on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.incoming.on_header(name, value)

    def on_headers_complete(self) -> None:
        self.incoming.on_headers_complete()

    def on_chunk_header(self) -> None:
        self.incoming.on_chunk(data_follows=True)

    def on_chunk_complete(self) -> None:
        self.incoming.on_chunk(data_follows=False)

    def on_body(self, body: bytes) -> None:
        self.incoming.on_body(body)

    def on_message_complete(self) -> None:
        self.incoming.on_message_complete()


def _head_refusal(request: Request, content_length: int, limits: Limits) -> tuple[Refusal | None, bool]:
    """Whether a whole head is refused (and how), and whether its body is transfer-coded."""
    if request.http not in ("1.1", "1.0"):
        return _malformed(f"HTTP/{request.http} is not served"), False
    if request.method == "CONNECT":
        return Refusal(400, "Bad Request", "Bad Request: CONNECT is not served here."), False
    fields = request.fields
    hosts = sum(1 for name, _ in fields if name.lower() == b"host")
    if hosts > 1 or (hosts == 0 and request.http == "1.1"):  # RFC 9112 section 3.2: exactly one
        return Refusal(400, "Bad Request", "Bad Request: the request needs one Host field."), False
    codings = [
        coding.strip().lower()
        for name, value in fields
        if name.lower() == b"transfer-encoding"
        for coding in value.split(b",")
    ]
    transfer_coded = bool(codings)
    if transfer_coded and request.http == "1.0":  # RFC 9112 section 6.1: HTTP/1.0 has none
        return _malformed("Transfer-Encoding in an HTTP/1.0 request"), True
    if transfer_coded and codings != [b"chunked"]:  # RFC 9112 section 6.1: one not understood is a 501
        message = "Not Implemented: the only transfer coding served is chunked."
        return Refusal(501, "Not Implemented", message), True
    if content_length > limits.body:
        return _too_large(limits.body), transfer_coded
    return None, transfer_coded


def _malformed(detail: str) -> Refusal:
    return Refusal(400, "Bad Request", f"Bad Request: the request's HTTP framing is malformed ({detail}).")


def _fields_refusal(detail: str) -> Refusal:
    return Refusal(431, "Request Header Fields Too Large", f"Request Header Fields Too Large: {detail}.")


def _head_too_large(limit: int) -> Refusal:
    return _fields_refusal(f"the request line and headers may take {limit} bytes at most")


def _too_large(limit: int) -> Refusal:
    message = f"Request Entity Too Large: the request body is larger than the limit of {limit} bytes."
    return Refusal(413, "Request Entity Too Large", message)
