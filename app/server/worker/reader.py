"""A connection's reading of its requests, as llhttp frames them (`Reader`).

httptools (llhttp, Node.js's parser) is the only parser of a request's bytes. `Reader` is the
parser's protocol: a connection (connection.py's `Conn`) is a `Reader`, so the parser's callbacks
land on the connection, as in uvicorn's httptools protocol. Its parser is fed every byte exactly
once as it arrives; the callbacks build whole requests (head and body) into `ready`, in order.
The limits are counted as the bytes go by:

- the request line (`limit_request_line`, 414), the number of header fields
  (`limit_request_fields`) and each field's size (`limit_request_field_size`), and the whole head
  (`max_head`), each 431;
- the body, decoded (`max_body`), and its chunk framing on top of it (`FRAMING_ALLOWANCE`), 413;
- each chunk's size line, extensions included (`MAX_SIZE_LINE`), 400.

Any refusal, a framing error included, is answered and the connection then closes: the bytes
after a request that could not be framed are never read as another request.
"""

from __future__ import annotations

import json
import time
from collections import deque

import httptools

#: At most this many bytes are fed to the parser at once. Between slices the limits are checked,
#: and parsing stops while a whole request waits to be served, so that a pipelining client's
#: bytes wait in its socket, not as parsed requests in memory.
SLICE = 16 * 1024
#: Chunk sizes, extensions and trailers a body may add on top of its decoded bytes.
FRAMING_ALLOWANCE = 16 * 1024
#: A chunk's size line, its extensions included: llhttp reads extensions of any length, and
#: the service reads none, so a longer one is malformed framing.
MAX_SIZE_LINE = 16 * 1024

IDLE, HEAD, BODY = 0, 1, 2


class Refusal(Exception):
    """A request the worker answers itself, then closes the connection."""

    def __init__(self, status: int, reason: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.retry_after = retry_after  # seconds, for a Retry-After field


class Limits:
    """What one request may take; the worker's, shared by its connections."""

    def __init__(self, request_line: int, fields: int, field_size: int, head: int, body: int) -> None:
        # gunicorn's convention: 0 is "no limit" for the first three.
        self.request_line = request_line or 1 << 62
        self.fields = fields or 1 << 62
        self.field_size = field_size or 1 << 62
        self.head = head
        self.body = body


class Request:
    """A request as the parser framed it: bytes, not yet an environ.

    gunicorn's `pre_request` and `post_request` hooks are handed it, and the access log reads
    it, with the attributes gunicorn documents for its own request (`method`, `uri`, `path`,
    `query`, `fragment`, `version` as a tuple, `headers` with upper-case names, `trailers`,
    `scheme`); `body` is the whole body's bytes, not a stream.
    """

    __slots__ = ("body", "fields", "http", "keep_alive", "method", "upgrade", "url")

    scheme = "http"  # TLS ends at the reverse proxy

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.method = "GET"
        self.http = "1.1"
        self.keep_alive = True
        self.upgrade = False

    @property
    def uri(self) -> str:
        return self.url.decode("latin-1")

    @property
    def path(self) -> str:
        return self.url.partition(b"#")[0].partition(b"?")[0].decode("latin-1")

    @property
    def query(self) -> str:
        return self.url.partition(b"?")[2].partition(b"#")[0].decode("latin-1")

    @property
    def fragment(self) -> str:
        return self.url.partition(b"#")[2].decode("latin-1")

    @property
    def version(self) -> tuple[int, int]:
        major, _, minor = self.http.partition(".")
        return int(major), int(minor or 0)

    @property
    def trailers(self) -> list[tuple[str, str]]:
        return []  # a chunked body's trailer fields are read, not passed on

    @property
    def headers(self) -> list[tuple[str, str]]:
        return [(name.decode("latin-1").upper(), value.decode("latin-1")) for name, value in self.fields]


class Reader:
    """The parser's protocol and the requests it has framed; see the module docstring. A
    connection is one (connection.py); alone, it frames bytes (the framing tests)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.parser = httptools.HttpRequestParser(self)
        self.ready: deque[Request] = deque()
        self.refusal: Refusal | None = None  # answered once `ready` is served, then close
        self.unparsed = b""  # read, not yet fed: parsing waits while a request is ready
        self.phase = IDLE
        self.started = 0.0  # when the request being read began
        self.received = 0  # its bytes so far, for the connection cap's choice
        self.wants_continue = False
        self._request = Request()
        self._head_bytes = 0
        self._head_count = 0
        self._framing_bytes = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._content_length = 0
        self._size_line: int | None = None  # a chunk's size line being read: its bytes so far

    def request_bytes(self) -> int:
        """The request bytes held: unparsed, parsed and not yet served."""
        held = len(self.unparsed) + self._body_size
        if self.phase == HEAD:
            held += self._head_bytes
        for request in self.ready:
            held += len(request.body) + len(request.url)
        return held

    def discard(self) -> None:
        """Forget every request byte read: the connection only lingers now."""
        self.ready.clear()
        self.unparsed = b""
        self._body = []
        self._body_size = 0

    @property
    def has_work(self) -> bool:
        """A request (or a refusal) is ready to be answered without reading more."""
        return bool(self.ready or self.refusal or self.unparsed)

    # --- feeding the parser ----------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Parse `data` (and what was held back) until a request is whole, in slices; keep the rest."""
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
            self.started = time.monotonic()
            self.received = 0
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            # llhttp stops at an Upgrade or CONNECT request. This server switches no protocol:
            # the request is served as any other, and the connection then closes.
            if self.ready:
                self.ready[-1].keep_alive = False
                self.ready[-1].upgrade = True
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

    # --- llhttp's callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.phase = HEAD
        self._request = Request()
        self._head_bytes = self._head_count = 0
        self._framing_bytes = self._body_size = self._content_length = 0
        self._body = []
        self._size_line = None

    def on_url(self, url: bytes) -> None:
        request = self._request
        request.url += url
        if len(request.url) > self.limits.request_line:
            message = f"URI Too Long: the request line may take {self.limits.request_line} bytes at most."
            raise _refuse(self, Refusal(414, "URI Too Long", message))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_count += 1
        size = len(name) + len(value) + 2
        self._head_bytes += size + 2
        if self._head_count > self.limits.fields:
            detail = f"a request may have {self.limits.fields} header fields at most"
            raise _refuse(self, _fields_refusal(detail))
        if size > self.limits.field_size:
            detail = f"a header field may take {self.limits.field_size} bytes at most"
            raise _refuse(self, _fields_refusal(detail))
        if self._head_bytes > self.limits.head:
            raise _refuse(self, _head_too_large(self.limits.head))
        if self.phase == BODY:
            return  # a trailer field: framing, counted against the body, not passed on
        if name.lower() == b"content-length":
            self._content_length = int(value)  # llhttp has checked that it is digits only
        self._request.fields.append((name, value))

    def on_headers_complete(self) -> None:
        request = self._request
        parser = self.parser
        request.http = parser.get_http_version()
        request.method = parser.get_method().decode("ascii")
        request.keep_alive = parser.should_keep_alive()
        self.phase = BODY
        fields = request.fields
        refusal, transfer_coded = _head_refusal(request, self._content_length, self.limits)
        if refusal is not None:
            raise _refuse(self, refusal)
        if transfer_coded:
            self._size_line = 0
        self.wants_continue = (
            request.http == "1.1"
            and (transfer_coded or self._content_length > 0)
            and any(name.lower() == b"expect" and value.lower() == b"100-continue" for name, value in fields)
        )

    def on_chunk_header(self) -> None:
        self._size_line = None  # the chunk's data follows

    def on_chunk_complete(self) -> None:
        self._size_line = 0  # the next chunk's size line follows

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self.limits.body:
            raise _refuse(self, _too_large(self.limits.body))
        self._body.append(body)

    def on_message_complete(self) -> None:
        request = self._request
        request.body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        self._body_size = 0  # counted in the request now (holding())
        self.ready.append(request)
        self.phase = IDLE
        self.wants_continue = False
        self._size_line = None


def _head_refusal(request: Request, content_length: int, limits: Limits) -> tuple[Refusal | None, bool]:
    """Whether a whole head is refused (and how), and whether its body is transfer-coded."""
    if request.http not in ("1.1", "1.0"):
        return _malformed(f"HTTP/{request.http} is not served"), False
    if request.method == "CONNECT":
        return Refusal(400, "Bad Request", "Bad Request: CONNECT is not served here."), False
    fields = request.fields
    hosts = sum(1 for name, _ in fields if name.lower() == b"host")
    if hosts > 1 or (hosts == 0 and request.http == "1.1"):
        # RFC 9112 section 3.2: exactly one Host in HTTP/1.1, else 400.
        return Refusal(400, "Bad Request", "Bad Request: the request needs one Host field."), False
    codings = [
        coding.strip().lower()
        for name, value in fields
        if name.lower() == b"transfer-encoding"
        for coding in value.split(b",")
    ]
    transfer_coded = bool(codings)
    if transfer_coded and request.http == "1.0":
        # RFC 9112 section 6.1: HTTP/1.0 has no Transfer-Encoding; its framing is faulty.
        return _malformed("Transfer-Encoding in an HTTP/1.0 request"), True
    if transfer_coded and codings != [b"chunked"]:
        # RFC 9112 section 6.1: a transfer coding the server does not understand is a 501.
        message = "Not Implemented: the only transfer coding served is chunked."
        return Refusal(501, "Not Implemented", message), True
    if content_length > limits.body:
        return _too_large(limits.body), transfer_coded
    return None, transfer_coded


def _refuse(reader: Reader, refusal: Refusal) -> Refusal:
    """Record the refusal (raising it from a callback stops the parser where it is)."""
    reader.refusal = refusal
    return refusal


def _malformed(detail: str) -> Refusal:
    return Refusal(400, "Bad Request", f"Bad Request: the request's HTTP framing is malformed ({detail}).")


def _fields_refusal(detail: str) -> Refusal:
    return Refusal(431, "Request Header Fields Too Large", f"Request Header Fields Too Large: {detail}.")


def _head_too_large(limit: int) -> Refusal:
    return _fields_refusal(f"the request line and headers may take {limit} bytes at most")


def _too_large(limit: int) -> Refusal:
    return Refusal(
        413,
        "Request Entity Too Large",
        f"Request Entity Too Large: the request body is larger than the limit of {limit} bytes.",
    )


# --- the worker's own answers: the service's JSON Error record, each closing the connection ---


def encode_refusal(refusal: Refusal) -> bytes:
    """The refusal's bytes. Its message never quotes the request: it can hold a token."""
    body = json.dumps({"error": refusal.status, "message": refusal.message}).encode("ascii")
    retry = "" if refusal.retry_after is None else f"Retry-After: {refusal.retry_after}\r\n"
    head = (
        f"HTTP/1.1 {refusal.status} {refusal.reason}\r\nConnection: close\r\n{retry}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def watches_full(limit: int) -> Refusal:
    """A watch past the worker's share of its connections (loop.py's `watch_limit`)."""
    message = (
        f"Service Unavailable: this server holds as many watches of the feed as it may ({limit});"
        " retry shortly, or poll."
    )
    return Refusal(503, "Service Unavailable", message, retry_after=5)


TIMED_OUT = Refusal(408, "Request Timeout", "Request Timeout: the request did not arrive in time.")
APP_ERROR = Refusal(
    500, "Internal Server Error", "Internal Server Error: the service failed to answer; the error is logged."
)
