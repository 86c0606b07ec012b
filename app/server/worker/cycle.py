"""A request's cycle, as uvicorn's `RequestResponseCycle`: the request as parsed, its environ, the
app's call with gunicorn's hooks and access line, the answer's head and body, and the worker's own
answers (Werkzeug's `HTTPException`s, as the service's JSON Error record).

The worker owns the framing fields and drops the app's hop-by-hop ones (PEP 3333). The environ has
gunicorn's keys, built from the standard library (gunicorn's helpers are not its documented API);
the app sees a chunked body's `CONTENT_LENGTH`, and no field whose name has an underscore
(gunicorn's default `header_map`), so `X_Forwarded_For` never passes for `X-Forwarded-For`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import ipaddress
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from email.utils import formatdate
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote_to_bytes
from wsgiref.util import FileWrapper

import gunicorn
import httptools
from werkzeug import exceptions

#: Fields the worker owns: the hop-by-hop ones (RFC 9110 section 7.6.1) as gunicorn lists them
#: ("trailers"), with RFC 9110's `Trailer`, Date and Server.
_HOP = ("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers")
HOP_BY_HOP = frozenset((*_HOP, "transfer-encoding", "upgrade", "date", "server"))
#: An answer's pieces are collected into one write up to this many bytes.
COLLECT_BYTES = 64 * 1024
#: The most of a large answer one turn sends before the connection goes to the back of the queue.
SEND_QUOTA = 256 * 1024
#: How a send went: all out, waiting for the socket (or the next turn), or the client has gone.
DONE, WAITING, GONE = 0, 1, 2
#: A slow client is given this many bytes a second on top of its deadline, for a large body or answer.
BYTES_PER_SECOND = 65536
LAST_CHUNK = b"0\r\n\r\n"
TIMED_OUT = exceptions.RequestTimeout("the request did not arrive in time.")
CUT_SHORT = exceptions.RequestTimeout(
    "the request body was not received in full before the client stopped sending."
)
APP_ERROR = exceptions.InternalServerError("the service failed to answer; the error is logged.")


def frame_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Request:
    """A request as the parser framed it, with the attributes gunicorn documents for its own (its
    `pre_request`/`post_request` hooks and the access log read them); `body` is all its bytes."""

    __slots__ = ("body", "fields", "http", "keep_alive", "method", "url")

    scheme = "http"  # TLS ends at the reverse proxy

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.method = "GET"
        self.http = "1.1"
        self.keep_alive = True

    @property
    def uri(self) -> str:
        return self.url.decode("latin-1")

    @property
    def path(self) -> str:
        url = self.url
        if url[:1] not in (b"/", b"*"):  # absolute-form: its path alone, as gunicorn's request has it
            with contextlib.suppress(httptools.HttpParserInvalidURLError):
                url = httptools.parse_url(url).path or b""
        return url.partition(b"#")[0].partition(b"?")[0].decode("latin-1")

    @property
    def query(self) -> str:
        return self.url.partition(b"?")[2].partition(b"#")[0].decode("latin-1")

    @property
    def fragment(self) -> str:
        return self.url.partition(b"#")[2].decode("latin-1")

    @property
    def version(self) -> tuple[int, int]:
        return (1, 1) if self.http == "1.1" else (1, 0)  # the only two served (`RequestLimits.check_head`)

    @property
    def trailers(self) -> list[tuple[str, str]]:
        return []  # a chunked body's trailer fields are read, not passed on

    @property
    def headers(self) -> list[tuple[str, str]]:
        return [(name.decode("latin-1").upper(), value.decode("latin-1")) for name, value in self.fields]

    def expects_continue(self) -> bool:
        """Whether an HTTP/1.1 client waits for a 100 Continue before its body (RFC 9110 section 10.1.1)."""
        expects = (b"expect", b"100-continue")
        return self.http == "1.1" and any(
            (name.lower(), value.lower()) == expects for name, value in self.fields
        )


@functools.lru_cache(maxsize=1)
def http_date(second: int) -> str:
    """The Date field's value for `second` (a whole `time.time()`): made once a second."""
    return formatdate(second, usegmt=True)


class Head(NamedTuple):
    data: bytes
    keep_alive: bool
    sends_body: bool  # False for HEAD, 1xx, 204 and 304
    chunked: bool
    declared: int | None  # the app's Content-Length


class Answer:
    """What the app answers. `status`, `headers` and `sent` (the body's bytes) are what gunicorn's
    access log reads."""

    __slots__ = ("chunks", "headers", "sent", "status")

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.sent: int | None = None

    @property
    def status_code(self) -> int:
        """As gunicorn's response has it, for `post_request` hooks."""
        return int(self.status[:3])

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if self.status and exc_info is None:
            raise AssertionError("start_response was already called")
        # Nothing is sent before the app returns, so an error page may always replace an answer.
        self.status, self.headers = status, headers
        return self.chunks.append

    def encode(self, method: str, keep_alive: bool) -> tuple[bytes, bool]:
        """The answer's bytes, and whether the connection stays open."""
        body = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        head = self.head(method, keep_alive, len(body))
        self.sent = len(body) if head.sends_body else 0
        return (head.data + body if head.sends_body else head.data), head.keep_alive

    def head(self, method: str, keep_alive: bool, length: int | None, http11: bool = True) -> Head:
        """The head for a body of `length` bytes; None: not known yet, so chunked unless the app
        declared its length."""
        status = self.status
        code = int(status[:3])
        sends_body = not (code < 200 or code in (204, 304) or method == "HEAD")
        lines = [f"HTTP/1.1 {status}\r\n"]
        declared = None
        for name, value in self.headers:
            lower = name.lower()
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError(f"the header field {name!r} has a line break")
            if lower in HOP_BY_HOP:
                if lower == "connection" and "close" in value.lower():
                    keep_alive = False
                continue
            if lower == "content-length":
                declared = int(value)
            lines.append(f"{name}: {value}\r\n")
        unframed = declared is None and sends_body
        chunked = unframed and length is None and http11
        if chunked:
            lines.append("Transfer-Encoding: chunked\r\n")
        elif unframed and length is None:
            keep_alive = False  # on HTTP/1.0, ended by the close
        elif unframed:
            # A HEAD's body is not here to count (RFC 9110 §8.6: no Content-Length but GET's).
            lines.append(f"Content-Length: {length}\r\n")
        elif sends_body and length is not None and declared != length:
            raise ValueError(f"the app declared Content-Length {declared} for a body of {length} bytes")
        connection = "keep-alive" if keep_alive else "close"
        lines.append(f"Date: {http_date(int(time.time()))}\r\nConnection: {connection}\r\n\r\n")
        return Head("".join(lines).encode("latin-1"), keep_alive, sends_body, chunked, declared)


#: The fields of the app's answer that the worker's own answer in its place keeps.
_KEPT = ("access-control-", "vary")


def encode_refusal(error: exceptions.HTTPException, answer: Answer | None = None) -> bytes:
    """The worker's own answer, then close: the service's JSON Error record, in place of the app's
    `answer` if any (the access line reads it). Its message never quotes the request (it can hold
    a token)."""
    answer = answer or Answer()
    fields = [("Content-Type", "application/json"), ("X-Content-Type-Options", "nosniff")]  # as the app's
    fields += [(name, value) for name, value in error.get_headers() if name == "Retry-After"]
    # The app's CORS decision for this request stands: without it a page on an allowed origin could
    # not read the refusal (nor its Retry-After), only a network error.
    fields += [(name, value) for name, value in answer.headers if name.lower().startswith(_KEPT)]
    answer.start_response(f"{error.code} {error.name}", fields, exc_info=True)
    record = {"error": error.code, "message": f"{error.name}: {error.description}"}
    answer.chunks = [json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"]  # as the app does
    return answer.encode("GET", keep_alive=False)[0]


class IterBody:
    """The rest of an app's iterable, framed (chunked, or counted against its Content-Length)."""

    __slots__ = ("_iterator", "chunked", "left", "result")

    def __init__(self, iterator: Iterator[bytes], result: Any, chunked: bool, length: int | None) -> None:
        self._iterator, self.result = iterator, result
        self.chunked = chunked
        self.left = length  # the bytes the Content-Length still promises; None when chunked or unknown

    def pump(self, put: Callable[[memoryview], int], quota: int) -> int:
        """Send about `quota` bytes of the app's next pieces. ValueError when it gives more or fewer
        than its Content-Length (the connection is then closed, the answer cut)."""
        for piece in self._iterator:
            if not piece:
                continue
            if self.left is not None:
                if len(piece) > self.left:
                    raise ValueError("the app gave more bytes than its Content-Length")
                self.left -= len(piece)
            went = put(memoryview(frame_chunk(piece) if self.chunked else piece))
            quota -= len(piece)
            if went != DONE or quota <= 0:
                return went or WAITING  # its turn is up: the others' come first
        if self.left:
            raise ValueError("the app gave fewer bytes than its Content-Length")
        return put(memoryview(LAST_CHUNK)) if self.chunked else DONE


#: What `Serving.serve` gives the connection: the answer's first bytes, whether to keep the
#: connection, and a large answer's rest.
Served = tuple[bytes, bool, IterBody | None]


def close_result(result: Any, log: Any = None) -> None:
    """PEP 3333: the app's iterable's `close`, if it has one, is called however its answer ends
    (once). With `log`, its error is logged, not raised."""
    close = getattr(result, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        if log is None:
            raise
        log.exception("Error closing an answer")


class EnvironBuilder:
    """Builds environs (PEP 3333) for one worker: what is the same for each request, once."""

    def __init__(self, cfg: Any, offers: dict[str, Any]) -> None:
        # A trailing slash is the same prefix (`/store/` is `/store`): taken off with the prefix,
        # it would make `/store//plants` the path `/plants`, where a doubled slash is the JSON 404.
        self.script_name = os.environ.get("SCRIPT_NAME", "").rstrip("/")
        #: The prefix as a path under it starts: `/storefront` is not under `/store`.
        self.script_slash = self.script_name + "/"
        self.static = {
            "wsgi.version": (1, 0),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": cfg.threads > 1,
            "wsgi.multiprocess": cfg.workers > 1,
            "wsgi.run_once": False,
            "wsgi.file_wrapper": FileWrapper,  # an iterable as any other: read a block at a time
            "wsgi.input_terminated": True,
            "SERVER_SOFTWARE": f"gunicorn/{gunicorn.__version__}",
            "wsgi.url_scheme": "http",
            "SCRIPT_NAME": self.script_name,
            **offers,
        }
        # Every peer ('*'), else the addresses and networks named (gunicorn has checked them).
        names = {name.strip() for name in cfg.forwarded_allow_ips or ()} - {""}
        self.trusted: Literal[True] | list[Any] = (
            True if "*" in names else [ipaddress.ip_network(name, strict=False) for name in names]
        )
        # gunicorn's secure_scheme_headers, as environ keys: from a trusted peer, they set the scheme.
        self.scheme_fields = {
            "HTTP_" + name.upper().replace("-", "_"): value.lower()
            for name, value in (cfg.secure_scheme_headers or {}).items()
        }

    def shared(self, client: Any, server: Any) -> tuple[dict[str, Any], bool]:
        """What every request of a connection shares, and whether its peer may set the scheme."""
        environ = dict(self.static)
        if isinstance(client, tuple):
            environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = client[0], str(client[1])
        else:  # a unix socket
            environ["REMOTE_ADDR"] = client.decode() if isinstance(client, bytes) else str(client or "")
        server = server if isinstance(server, tuple) else (server, 80)
        environ["SERVER_NAME"], environ["SERVER_PORT"] = str(server[0]), str(server[1])
        trusted = self.trusted is True or (
            isinstance(client, tuple) and any(ipaddress.ip_address(client[0]) in net for net in self.trusted)
        )
        return environ, trusted

    def build(self, conn: Any, request: Request) -> dict[str, Any]:
        """The environ of `request` on `conn` (a `Conn`, which keeps its shared part)."""
        base = conn.environ_base
        if base is None:
            base, conn.trusted_peer = self.shared(conn.client, conn.server)
            conn.environ_base = base
        environ = base.copy()
        url = request.url
        if url[:1] == b"/":
            # A fragment is the client's own (RFC 9110 section 4.2.5): no part of the path or query.
            path, _, query = url.partition(b"#")[0].partition(b"?")
        elif url == b"*":
            path, query = b"*", b""
        else:  # absolute-form (RFC 9112 section 3.2.2)
            try:
                parsed = httptools.parse_url(url)
            except httptools.HttpParserInvalidURLError:
                raise exceptions.BadRequest("the request target is no URI.") from None
            path, query = parsed.path or b"/", parsed.query or b""
        path_info = (unquote_to_bytes(path) if b"%" in path else path).decode("latin-1")
        if self.script_name and (path_info.startswith(self.script_slash) or path_info == self.script_name):
            path_info = path_info[len(self.script_name) :]
        environ["REQUEST_METHOD"] = request.method
        environ["RAW_URI"] = url.decode("latin-1")
        environ["PATH_INFO"] = path_info
        environ["QUERY_STRING"] = query.decode("latin-1")
        environ["SERVER_PROTOCOL"] = "HTTP/1.1" if request.http == "1.1" else "HTTP/1.0"
        body = request.body
        environ["wsgi.input"] = io.BytesIO(body)
        if body:
            environ["CONTENT_LENGTH"] = str(len(body))
        for name, value in request.fields:
            if b"_" in name:
                continue
            key = name.upper().replace(b"-", b"_")
            text = value.decode("latin-1")
            if key == b"CONTENT_TYPE":
                # One value (RFC 9110 section 8.3): two are joined, which names no media type the
                # service reads (415), where the last alone would be read past a proxy that took the first.
                environ["CONTENT_TYPE"] = (
                    f"{environ['CONTENT_TYPE']},{text}" if "CONTENT_TYPE" in environ else text
                )
            elif key == b"CONTENT_LENGTH":
                environ.setdefault("CONTENT_LENGTH", text)  # a decoded chunked body's is its own
            elif key != b"TRANSFER_ENCODING":
                field = "HTTP_" + key.decode("latin-1")
                environ[field] = f"{environ[field]},{text}" if field in environ else text
        if conn.trusted_peer:
            for field, secure in self.scheme_fields.items():
                value = environ.get(field)
                if value is not None:
                    environ["wsgi.url_scheme"] = "https" if value.lower() == secure else "http"
        return environ


#: How an answer's end is recorded: answer, request, environ, its `time.perf_counter()` at its start.
Record = Callable[[Answer, Request, dict[str, Any], float], None]


def recorder(worker: Any) -> Record:
    """The end of every answer, however it went: gunicorn's access line, then its `post_request`
    hook, as gunicorn's own workers call it."""
    log, post_request = worker.log, worker.cfg.post_request  # read once: each read of a setting validates

    def record(answer: Answer, request: Request, environ: dict[str, Any], started: float) -> None:
        log.access(answer, request, environ, timedelta(seconds=time.perf_counter() - started))
        try:
            post_request(worker, request, environ, answer)
        except Exception:
            log.exception("Exception in post_request hook")

    return record


@dataclass
class Parked:
    """An answer that waits on a connection, as parking.py steps it to its end."""

    iterable: Any  # the app's answer that can wait (parking.py's docstring)
    answer: Answer
    request: Request
    environ: dict[str, Any]
    keep_alive: bool
    started: float
    record: Record  # the access line and post_request (`recorder`)
    wake: Callable[[], None]  # one for every park: the signal keeps one entry
    head_sent: bool = False
    streamed: int = 0  # a stream's body bytes sent so far

    @property
    def chunked(self) -> bool:
        return self.request.http == "1.1"

    def abandon(self, log: Any) -> None:
        """Its client left (or it timed out) before its end: recorded with the status it began
        with and the bytes sent, or nginx's 499 when nothing was sent yet."""
        close_result(self.iterable, log)
        if not self.head_sent:
            self.answer.status = "499 Client Closed Request"
        self.answer.sent = self.streamed
        self.record(self.answer, self.request, self.environ, self.started)


class Serving:
    """Runs the app for whole requests of a gunicorn `worker` (its `cfg`, `log`, `wsgi`, `alive`,
    `max_requests`); `park` hands an answer that can wait to parking.py (False: no room)."""

    def __init__(
        self, worker: Any, registry: Any, park: Callable[..., bool], offers: dict[str, Any], cap: int
    ) -> None:
        self._worker, self._registry, self._max_connections = worker, registry, cap
        self._start_parking = park
        cfg = worker.cfg
        self.environs = EnvironBuilder(cfg, offers)
        self.requests_served = 0
        # Read once: each of gunicorn's settings is a lookup and a validation on every read.
        self._app, self._log = worker.wsgi, worker.log
        self._pre_request = cfg.pre_request
        self._record = recorder(worker)
        self._keeps_alive = cfg.keepalive > 0  # gunicorn: a keep-alive of 0 closes after each answer
        self._max_requests = worker.max_requests

    def serve(self, conn: Any, request: Request) -> Served | None:
        """The answer to `request`; None when it waits (parking.py)."""
        try:
            environ = self.environs.build(conn, request)
        except exceptions.HTTPException as refusal:
            return encode_refusal(refusal), False, None
        worker, log, registry = self._worker, self._log, self._registry
        answer = Answer()
        started = time.perf_counter()
        try:
            # A failing hook is answered as a failing app is, as gunicorn's own workers do.
            self._pre_request(worker, request)
            self.requests_served += 1
            if self.requests_served >= self._max_requests and worker.alive:
                log.info("Autorestarting worker after current request.")
                worker.alive = False
            keep_alive = request.keep_alive and self._keeps_alive
            # Once the worker stops, only while its client has sent more requests already.
            keep_alive = keep_alive and (worker.alive or registry.owes_answers(conn))
            keep_alive = keep_alive and registry.counted < self._max_connections
            result = self._app(environ, answer.start_response)
            # An iterable that can wait (parking.py): two look-ups, asked of every answer.
            if not (hasattr(result, "subscribe") and hasattr(result, "deadline")):
                served = self._produce(request, answer, result, keep_alive)
            else:
                wake = functools.partial(registry.wake, conn)
                parked = Parked(result, answer, request, environ, keep_alive, started, self._record, wake)
                if self._start_parking(conn, parked):
                    return None
                close_result(result)  # its place in the app's own count is given back
                message = f"this server holds as many watches of the feed as it may ({registry.watch_limit});"
                full = exceptions.ServiceUnavailable(f"{message} retry shortly, or poll.", retry_after=5)
                served = encode_refusal(full, answer), False, None
        except Exception:
            if registry.unpark(conn) is not None:  # parked, then failed at its first step
                close_result(result, log)
            log.exception("Error handling request %s %s", request.method, request.path)
            served = encode_refusal(APP_ERROR, answer), False, None
        self._record(answer, request, environ, started)
        return served

    def _produce(self, request: Request, answer: Answer, result: Any, keep_alive: bool) -> Served:
        """The app's iterable as `Served`, closed here unless a large answer's rest goes on."""
        body: IterBody | None = None
        try:
            chunks, held = answer.chunks, 0
            iterator = iter(result)
            for chunk in iterator:
                if chunk:
                    chunks.append(chunk)
                    held += len(chunk)
                    if held > COLLECT_BYTES:
                        break
            else:
                return (*answer.encode(request.method, keep_alive), None)
            # Too large to hold: what came so far goes now, the rest as the client takes it.
            head = answer.head(request.method, keep_alive, None, http11=request.http == "1.1")
            first = b"".join(chunks)
            left = None if head.declared is None else head.declared - len(first)
            if head.sends_body and left is not None and left < 0:
                raise ValueError(f"the app declared Content-Length {head.declared} for a longer body")
            answer.sent = head.declared if head.sends_body else 0
            if not head.sends_body:
                return head.data, head.keep_alive, None
            body = IterBody(iterator, result, head.chunked, left)
            return head.data + (frame_chunk(first) if head.chunked else first), head.keep_alive, body
        finally:
            if body is None:
                close_result(result)
