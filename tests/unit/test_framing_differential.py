"""The worker's framing against h11's: the same bytes, split at random points across reads, must
be read the same way by both: where each request ends, its method, target and body, and whether
the stream is refused. Where the two differ by design, `by_design` names the case and the RFC.

The worker's reading is its connection, the parser's protocol (app/server/worker/connection.py), fed
as its turns feed it; h11's is a server connection that answers each request before the next.
"""

from __future__ import annotations

import re
import socket

import h11
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.server.worker.connection import BETWEEN, Conn, Context, Incoming, RequestLimits

LIMIT = 64 * 1024
#: The generated methods, all of which llhttp knows.
METHODS = {b"GET", b"POST", b"PUT", b"HEAD"}
TARGETS = {b"/plants", b"/plants/1?x=%20y", b"*", b"http://h/p", b"/\x7f"}

Reading = tuple[list[tuple[str, str, bytes]], str]


def worker_reading(chunks: list[bytes]) -> Reading:
    limits = RequestLimits(8190, 100, 8190, LIMIT, LIMIT)
    with socket.socket() as sock:  # never connected: only the parser is fed
        return _reading(
            Conn(sock, None, None, Context(None, None, print, None, 10.0, limits)).incoming, chunks
        )


def _reading(conn: Incoming, chunks: list[bytes]) -> Reading:
    requests: list[tuple[str, str, bytes]] = []
    for chunk in chunks:
        conn.feed(chunk)
        while conn.ready or (conn.unparsed and conn.refusal is None):
            while conn.ready:
                request = conn.ready.popleft()
                requests.append((request.method, request.url.decode("latin-1"), request.body))
                if not request.keep_alive:
                    return requests, "closed"
            if conn.unparsed and conn.refusal is None:
                conn.feed(b"")
        if conn.refusal is not None:
            return requests, "refused"
    return requests, "complete" if conn.phase == BETWEEN else "incomplete"


def h11_reading(chunks: list[bytes]) -> Reading:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=LIMIT)
    requests: list[tuple[str, str, bytes]] = []
    request, body = None, b""
    for chunk in chunks:
        conn.receive_data(chunk)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                return requests, "refused"
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.Request):
                request, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                requests.append((request.method.decode(), request.target.decode("latin-1"), body))
                conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
                conn.send(h11.EndOfMessage())
                if conn.our_state is h11.MUST_CLOSE:
                    return requests, "closed"
                conn.start_next_cycle()
    whole = conn.their_state is h11.IDLE and not conn.trailing_data[0]
    return requests, "complete" if whole else "incomplete"


def by_design(data: bytes, theirs: Reading) -> str | None:
    """Why the two readings of `data` may differ, or None where they must not."""
    head_lower = data.lower()
    methods = re.findall(rb"(?:^|\n)(\S*) (?:/|\*|http)", data) + [m.encode() for m, _, _ in theirs[0]]
    if any(method not in METHODS for method in methods):
        return "RFC 9110 §9.1: a method llhttp does not know; refused as malformed (400), not 501"
    if re.search(rb"\r(?!\n)", data):
        return "RFC 9112 §2.2: a bare CR; llhttp skips one before a request and refuses one elsewhere"
    if re.search(rb"content-length: *[0-9]+ *,", head_lower):
        return "RFC 9112 §6.3: a Content-Length list; the worker refuses even identical values"
    if any(target not in TARGETS for target in re.findall(rb"(?:^|\n)\S* (\S*) HTTP/", data)):
        return "RFC 9112 §3.2: llhttp checks the request target's form; h11 checks only its bytes"
    if re.search(rb"http/(?!1\.[01]\r?\n)", head_lower):
        return "RFC 9112 §2.3: only HTTP/1.0 and 1.1 are served; h11 reads any digit.digit as 1.x"
    if re.search(rb"(?:^|\n)\S+  |(?:^|\n)\S+ \S+  ", data):
        return "RFC 9112 §3: spaces between request-line words; llhttp takes them (a MAY), h11 refuses"
    if re.search(rb"\r\n[0-9a-fA-F]+ +\r\n", data):
        return "RFC 9112 §7.1: whitespace after a chunk size without an extension; llhttp refuses"
    if b"http/1.0" in head_lower and b"transfer-encoding" in head_lower:
        return "RFC 9112 §6.1: HTTP/1.0 with Transfer-Encoding is faulty framing; the worker refuses it"
    if head_lower.count(b"content-length") > 1:
        return "RFC 9112 §6.3: repeated Content-Length; the worker refuses even identical values"
    if b"\r\n " in data or b"\r\n\t" in data:
        return "RFC 9112 §5.2: obs-fold; the worker refuses it, h11 may unfold it"
    if b"\n" in data.replace(b"\r\n", b""):
        return "RFC 9112 §2.2: a bare LF line end; the worker refuses it, h11 accepts it"
    if b"transfer-encoding" in head_lower and b"content-length" in head_lower:
        return "RFC 9112 §6.3: both framings; the worker refuses, h11 takes the chunked one"
    return None


# --- the byte streams -------------------------------------------------------------------------

SIZES = st.sampled_from(
    ["{:x}", "{:X}", "0{:x}", "{:x};e=1", '{:x};e="q"', "{:x} ", " {:x}", "0x{:x}", "+{:x}"]
)
FIELDS = st.sampled_from(
    [
        b"X-A: b\r\n",
        b"X-A:b\r\n",
        b"X-A: b \r\n",
        b"X-A: a\x00b\r\n",
        b"X-A: a\rb\r\n",
        b"X-A: a\r\n b\r\n",
        b"X A: b\r\n",
        b"X-A : b\r\n",
        b": b\r\n",
        b"Connection: close\r\n",
        b"Transfer-Encoding: identity\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n",
        b"Content-Length: 3\r\n",
        b"Content-Length: 03\r\n",
        b"Content-Length: 3, 3\r\n",
        b"Content-Length: -3\r\n",
    ]
)


@st.composite
def one_request(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"HEAD"]))
    target = draw(st.sampled_from([*TARGETS, b"/a b"]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2.0"]))
    fields = b"Host: h\r\n" + b"".join(draw(st.lists(FIELDS, max_size=2)))
    # Printable bodies: a line break in the stream is then always framing, which `by_design` reads.
    body = draw(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)).encode()
    framing = draw(st.sampled_from(["length", "chunked", "none"]))
    if framing == "length":
        return b"%s %s %s\r\n%sContent-Length: %d\r\n\r\n%s" % (
            method,
            target,
            version,
            fields,
            len(body),
            body,
        )
    if framing == "none":
        return b"%s %s %s\r\n%s\r\n" % (method, target, version, fields)
    chunks = b""
    for start in range(0, len(body), 7):
        piece = body[start : start + 7]
        size = draw(SIZES).format(len(piece)).encode()
        chunks += size + b"\r\n" + piece + draw(st.sampled_from([b"\r\n", b"\r\n", b"\n", b"", b"XX"]))
    trailer = draw(st.sampled_from([b"", b"T: 1\r\n"]))
    head = b"%s %s %s\r\n%sTransfer-Encoding: chunked\r\n\r\n" % (method, target, version, fields)
    return head + chunks + b"0\r\n" + trailer + b"\r\n"


@st.composite
def stream(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    data = b"".join(draw(st.lists(one_request(), min_size=1, max_size=3)))
    if draw(st.booleans()):  # one mutation: a byte changed, dropped or added
        at = draw(st.integers(0, len(data) - 1))
        byte = bytes([draw(st.sampled_from(b"\r\n \t\x00:;0aZ"))])
        data = draw(
            st.sampled_from(
                [data[:at] + byte + data[at + 1 :], data[:at] + data[at + 1 :], data[:at] + byte + data[at:]]
            )
        )
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=4))))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return data, [chunk for chunk in chunks if chunk]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream())
def test_the_worker_frames_requests_as_h11_does(case):
    data, chunks = case
    ours, theirs = worker_reading(chunks), h11_reading(chunks)
    if ours != theirs and not refused_sooner(ours, theirs):
        assert by_design(data, theirs), (data, ours, theirs)


def refused_sooner(ours: Reading, theirs: Reading) -> bool:
    """The worker refuses at the first byte that cannot belong to a valid request; h11 reads a
    whole line, or the whole head, before it judges it."""
    return ours[1] == "refused" and theirs[1] == "incomplete" and ours[0] == theirs[0]


def test_where_the_stream_is_split_does_not_matter():
    data = (
        b"POST /plants HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;e=1\r\nabc\r\n0\r\nT: 1\r\n\r\n"
        b"GET /plants/1 HTTP/1.1\r\nHost: h\r\n\r\n"
    )
    expected = ([("POST", "/plants", b"abc"), ("GET", "/plants/1", b"")], "complete")
    for cut in range(1, len(data)):
        assert worker_reading([data[:cut], data[cut:]]) == expected
    assert worker_reading([bytes([byte]) for byte in data]) == expected
    assert h11_reading([data]) == expected
