"""Hostile input against a real gunicorn: a table-driven corpus, each case with its expected status.

Body-level cases must get a JSON Error 4xx. Protocol-level cases must get a 4xx (also the JSON
Error record, written by the worker) or a closed connection: never a 5xx, never a hang. After each
case the service answers normally and every plant stored before is unchanged: each case is checked
on its own, in whatever order the cases run.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import time
from dataclasses import dataclass, field

import pytest

from tests.rawhttp import chunked, exchange, request
from tests.servers import TOKEN, Gunicorn

AUTH = ("Authorization", f"Bearer {TOKEN}")
JSON = ("Content-Type", "application/json")
READ_TIMEOUT = 2  # the server's GUNICORN_READ_TIMEOUT for this module: bounds the stall cases
BEFORE = [(900_000 + n, f"Stored plant {n}", None if n % 2 else "kept") for n in range(20)]


@dataclass
class Case:
    id: str
    data: bytes
    expected: int | None  # None: the server closes the connection without answering
    json_error: bool = True  # the answer is the JSON Error record
    headers: dict = field(default_factory=dict)  # expected response headers


def body_case(case_id: str, body: bytes | str, expected: int, headers=(AUTH, JSON)) -> Case:
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    return Case(case_id, request(body=data, headers=list(headers)), expected, json_error=expected != 200)


def deep(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


NON_STANDARD_JSON = [
    body_case("nan-id", '{"id": NaN, "name": "x"}', 400),
    body_case("infinity-id", '{"id": Infinity, "name": "x"}', 400),
    body_case("minus-infinity-id", '{"id": -Infinity, "name": "x"}', 400),
    body_case("nan-in-unknown-field", '{"id": 1, "name": "x", "extra": [NaN]}', 400),
    body_case("duplicate-id", '{"id": 1, "id": 2, "name": "x"}', 400),
    body_case("duplicate-name", '{"id": 1, "name": "x", "name": "y"}', 400),
    body_case("duplicate-key-nested", '{"id": 1, "name": "x", "e": {"a": 1, "a": 2}}', 400),
    body_case("lone-high-surrogate-name", '{"id": 1, "name": "\\ud800"}', 400),
    body_case("lone-low-surrogate-tag", '{"id": 1, "name": "x", "tag": "\\udfff"}', 400),
    body_case("lone-surrogate-key", '{"id": 1, "name": "x", "\\ud834": 1}', 400),
    body_case("reversed-surrogate-pair", '{"id": 1, "name": "\\udc00\\ud800"}', 400),
    body_case("uppercase-surrogate-escape", '{"id": 1, "name": "a\\uD800b"}', 400),
    body_case("surrogate-in-nested-array", '{"id": 1, "name": "x", "e": [["\\udabc"]]}', 400),
    body_case("raw-control-char-in-string", '{"id": 1, "name": "a\x01b"}', 400),
    body_case("single-quotes", "{'id': 1, 'name': 'x'}", 400),
    body_case("trailing-comma", '{"id": 1, "name": "x",}', 400),
    body_case("comment", '{"id": 1, /* c */ "name": "x"}', 400),
    body_case("unquoted-key", '{id: 1, "name": "x"}', 400),
    body_case("hex-number", '{"id": 0x10, "name": "x"}', 400),
    body_case("leading-zero", '{"id": 01, "name": "x"}', 400),
    body_case("leading-plus", '{"id": +1, "name": "x"}', 400),
    body_case("fraction-without-digits", '{"id": 1., "name": "x"}', 400),
    # An integral number is that integer, exactly (RFC 8259 section 6; JSON Schema's integer).
    body_case("exponent-integer", '{"id": 7e2, "name": "x"}', 200),
    body_case("utf8-encoded-surrogate", b'{"id": 1, "name": "\xed\xa0\x80"}', 400),
    body_case("overlong-utf8", b'{"id": 1, "name": "\xc0\xaf"}', 400),
    body_case("utf16-body", '{"id": 1, "name": "x"}'.encode("utf-16"), 400),
    body_case("utf8-bom", b'\xef\xbb\xbf{"id": 1, "name": "x"}', 400),
    # Exponents past decimal.Decimal's context: a 400 naming the field, never a 500.
    body_case("huge-exponent-id", '{"id": 1e99999999999999999999, "name": "x"}', 400),
    body_case("huge-negative-exponent-id", '{"id": 1.5e-99999999999999999999, "name": "x"}', 400),
    body_case("huge-exponent-elsewhere", '{"id": 1, "name": "x", "e": [-1E+99999999999999999999]}', 400),
    Case(
        "huge-exponent-path-id",
        request(method="GET", path="/plants/1e99999999999999999999999", headers=[AUTH]),
        400,
    ),
    Case(
        "huge-exponent-limit",
        request(method="GET", path="/plants?limit=1e99999999999999999999", headers=[AUTH]),
        400,
    ),
    body_case("valid-surrogate-pair-is-fine", '{"id": 800001, "name": "\\ud83c\\udf35 cactus"}', 200),
]

SHAPES_AND_SIZES = [
    body_case("nested-arrays-100", '{"id": 1, "name": "x", "e": ' + deep(100) + "}", 400),
    body_case("nested-arrays-5000", '{"id": 1, "name": "x", "e": ' + deep(5000) + "}", 400),
    body_case("nested-arrays-30000", deep(30000), 400),
    body_case("nested-objects-5000", '{"a":' * 5000 + "1" + "}" * 5000, 400),
    body_case("nested-name", '{"id": 1, "name": ' + deep(3000) + "}", 400),
    body_case("id-4000-digits", '{"id": ' + "9" * 4000 + ', "name": "x"}', 400),
    body_case("id-50000-digits", '{"id": ' + "9" * 50000 + ', "name": "x"}', 400),
    body_case("id-long-zero-fraction", '{"id": 701.' + "0" * 50000 + ', "name": "x"}', 200),
    body_case("id-long-fraction", '{"id": 1.' + "0" * 50000 + '1, "name": "x"}', 400),
    body_case("id-huge-exponent", '{"id": 1e999999999, "name": "x"}', 400),
    body_case("id-tiny-exponent", '{"id": 1e-999999999, "name": "x"}', 400),
    body_case("id-just-over-int64", '{"id": 9223372036854775808, "name": "x"}', 400),
    body_case("id-just-under-int64", '{"id": -9223372036854775809, "name": "x"}', 400),
    body_case("name-60000-chars", '{"id": 1, "name": "' + "n" * 60000 + '"}', 400),
    body_case("name-20000-escapes", '{"id": 1, "name": "' + "\\u00e9" * 10000 + '"}', 400),
    body_case("key-60000-chars", '{"id": 1, "name": "x", "' + "k" * 60000 + '": 1}', 400),
    body_case("3000-unknown-keys", "{" + ", ".join(f'"k{i}": {i}' for i in range(3000)) + "}", 400),
    body_case("array-of-20000", "[" + ",".join(["1"] * 20000) + "]", 400),
    body_case("string-body-60000", '"' + "s" * 60000 + '"', 400),
    body_case("whitespace-padding-is-fine", " " * 60000 + '{"id": 800002, "name": "padded"}', 200),
    body_case("minus-zero-is-an-integer", '{"id": -0, "name": "zero"}', 200),
    body_case("just-over-the-limit", '{"id": 1, "name": "' + "x" * (64 * 1024) + '"}', 413),
]

AUTHORIZATION_ABUSE = [
    body_case(
        "token-8000-chars",
        '{"id": 1, "name": "x"}',
        401,
        headers=(("Authorization", "Bearer " + "a" * 8000), JSON),
    ),
    body_case(
        "token-with-tab", '{"id": 1, "name": "x"}', 400, headers=(("Authorization", "Bearer te\tst"), JSON)
    ),
    body_case(
        "token-with-space", '{"id": 1, "name": "x"}', 400, headers=(("Authorization", "Bearer te st"), JSON)
    ),
    body_case(
        "tab-after-scheme",
        '{"id": 1, "name": "x"}',
        401,
        headers=(("Authorization", f"Bearer\t{TOKEN}"), JSON),
    ),
    body_case("bearer-no-token", '{"id": 1, "name": "x"}', 400, headers=(("Authorization", "Bearer"), JSON)),
    body_case(
        "bearer-trailing-spaces",
        '{"id": 1, "name": "x"}',
        400,
        headers=(("Authorization", "Bearer   "), JSON),
    ),
    body_case("two-authorization-headers", '{"id": 1, "name": "x"}', 400, headers=(AUTH, AUTH, JSON)),
    body_case(
        "wrong-then-right-header",
        '{"id": 1, "name": "x"}',
        400,
        headers=(("Authorization", "Bearer wrong"), AUTH, JSON),
    ),
    body_case(
        "latin1-in-token", '{"id": 1, "name": "x"}', 400, headers=(("Authorization", "Bearer t\xe9st"), JSON)
    ),
    body_case(
        "basic-scheme", '{"id": 1, "name": "x"}', 401, headers=(("Authorization", "Basic dXNlcjpwYXNz"), JSON)
    ),
    body_case("token-as-query-only", '{"id": 1, "name": "x"}', 401, headers=(JSON,)),
    Case(
        "control-char-in-header", request(body=b"{}", headers=[("Authorization", "Bearer t\x01t"), JSON]), 400
    ),
    Case("nul-in-header", request(body=b"{}", headers=[("Authorization", "Bearer t\x00t"), JSON]), 400),
    # Each field under gunicorn's 8190 bytes, but the head over the 64 KiB the worker buffers.
    Case(
        "head-over-64-kib",
        request(body=b"{}", headers=[AUTH, JSON, *[(f"X-Filler-{n}", "a" * 7000) for n in range(10)]]),
        431,
    ),
    Case(
        "header-over-limit",
        request(body=b"{}", headers=[("Authorization", "Bearer " + "a" * 9000), JSON]),
        431,
    ),
]

CHUNKED_BODY = b'{"id": 800003, "name": "chunked"}'
EXTENDED_BODY = b'{"id": 800007, "name": "a chunk extension at its bound"}'


def extended(body: bytes, extension_bytes: int) -> bytes:
    """A chunked POST /plants of one chunk whose size line is `extension_bytes` longer: `;e=aaa...`."""
    size_line = b"%x;e=" % len(body) + b"a" * (extension_bytes - 3)
    return chunked(headers=[AUTH, JSON], terminate=False) + size_line + b"\r\n" + body + b"\r\n0\r\n\r\n"


AT_LIMIT = b'{"id": 800005, "name": "exactly 64 KiB"}'
PROTOCOL = [
    Case(
        "chunked-body",
        chunked(CHUNKED_BODY[:10], CHUNKED_BODY[10:], headers=[AUTH, JSON]),
        200,
        json_error=False,
    ),
    Case(
        "chunked-exactly-at-the-limit",
        chunked(AT_LIMIT, b" " * (64 * 1024 - len(AT_LIMIT)), headers=[AUTH, JSON]),
        200,
        json_error=False,
    ),
    Case(
        "chunked-one-byte-over-the-limit",
        chunked(AT_LIMIT, b" " * (64 * 1024 - len(AT_LIMIT) + 1), headers=[AUTH, JSON]),
        413,
    ),
    Case("chunked-far-over-the-limit", chunked(*[b" " * 0x4000] * 8, headers=[AUTH, JSON]), 413),
    # A chunk's extensions count against the body's framing allowance (docs/operations.md): the
    # body limit, 64 KiB, and 16 KiB of sizes, extensions and trailers.
    Case("chunk-extension-of-16-kib", extended(EXTENDED_BODY, 16 * 1024), 200, json_error=False),
    Case("chunk-extension-of-30-kib", extended(EXTENDED_BODY, 30 * 1024), 200, json_error=False),
    Case("chunk-extension-of-120000-bytes", extended(EXTENDED_BODY, 120_000), 413),
    Case("chunked-bad-size", chunked(headers=[AUTH, JSON], terminate=False) + b"zz\r\n{}\r\n0\r\n\r\n", 400),
    Case(
        "content-length-and-transfer-encoding",
        b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    Case(
        "two-content-lengths",
        b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        400,
    ),
    Case("negative-content-length", b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    Case(
        "non-numeric-content-length", b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400
    ),
    Case("request-line-over-limit", b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    # The limit (4,094 bytes) is the whole line's, its method and version too, as gunicorn's own
    # parser counts it: a target of 4,090 bytes makes a line of 4,103; one of 4,081, of 4,094.
    Case(
        "request-line-over-limit-by-its-words", b"GET /" + b"a" * 4089 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414
    ),
    Case("request-line-at-limit", b"GET /" + b"a" * 4080 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    Case(
        "too-many-headers",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n",
        431,
    ),
    Case("invalid-method", b"P(ST /plants HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    Case("invalid-version", b"POST /plants HTTP/9.9\r\nHost: x\r\n\r\n", 400),
    Case("http-0.9", b"GET /\r\n\r\n", 400),
    Case("tls-handshake-on-plain-port", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400),
    # RFC 9112 §5.2: reject obs-fold or unfold it; llhttp rejects it.
    Case("obsolete-line-folding", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400),
    Case(
        "http-1.0",
        request(body=b'{"id": 800004, "name": "old client"}', headers=[AUTH, JSON], version="HTTP/1.0"),
        200,
        json_error=False,
    ),
    Case(
        "body-shorter-than-content-length-then-stall",
        b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
        b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"id": 1',
        408,
    ),
    # Only an unquoted `*` is the wildcard: a quoted one is a tag no plant has (RFC 9110 §13.1.1).
    Case(
        "quoted-star-if-match-deletes-nothing",
        request("DELETE", "/plants/900000", headers=[AUTH, ("If-Match", '"*"')]),
        412,
    ),
    Case(
        "quoted-star-if-none-match-is-no-wildcard",
        request(
            "PUT",
            "/plants/900001",
            body=b'{"name": "Stored plant 1"}',
            headers=[AUTH, JSON, ("If-None-Match", '"*"')],
        ),
        200,
        json_error=False,
    ),
    # A head that stops coming: 408 at its deadline, then close (as a body that stops coming).
    Case("headers-then-stall", b"POST /plants HTTP/1.1\r\nHost: x\r\n", 408),
]

CORPUS = NON_STANDARD_JSON + SHAPES_AND_SIZES + AUTHORIZATION_ABUSE + PROTOCOL


def create_request(plant_id: int, name: str, tag: str | None) -> bytes:
    plant = {"id": plant_id, "name": name, **({"tag": tag} if tag else {})}
    return request(body=json.dumps(plant).encode(), headers=[AUTH, JSON])


@pytest.fixture(scope="module")
def server():
    server = Gunicorn(env={"GUNICORN_READ_TIMEOUT": str(READ_TIMEOUT)})
    for plant_id, name, tag in BEFORE:
        assert exchange(server.port, create_request(plant_id, name, tag)).status == 200
    yield server
    server.stop()


def test_corpus_is_large_and_named_uniquely():
    assert len(CORPUS) >= 60
    assert len({case.id for case in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[case.id for case in CORPUS])
def test_hostile_case(server, case):
    # No hang: a case the server neither answers nor closes meets the socket's timeout (an error).
    response = exchange(server.port, case.data, timeout=READ_TIMEOUT + 10)
    if case.expected is None:
        assert response is None
        return
    assert response is not None
    assert response.status == case.expected, response.body[:300]
    assert response.status < 500
    if case.json_error:
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["X-Content-Type-Options"] == "nosniff"  # the app's, or the worker's
        record = response.json()
        assert record["error"] == case.expected
        assert isinstance(record["message"], str)
        assert record["message"]
    assert TOKEN.encode() not in response.body
    assert_served_normally_and_plants_unchanged(server)


def assert_served_normally_and_plants_unchanged(server: Gunicorn) -> None:
    """The plants stored before (`BEFORE`) are listed exactly as stored, and the log has no
    traceback and no 5xx: whatever hostile request came before."""
    page = exchange(server.port, request("GET", "/plants?limit=1000", headers=[AUTH]))
    assert page is not None
    assert page.status == 200, page.body[:300]
    stored = [plant for plant in page.json()["plants"] if plant["id"] >= BEFORE[0][0]]
    assert stored == [
        {"id": plant_id, "name": name, **({"tag": tag} if tag else {})} for plant_id, name, tag in BEFORE
    ]
    log = server.output()
    assert "Traceback" not in log
    assert '" 5' not in log  # no 5xx in the access log


def sent_in_pieces(port: int, data: bytes, cuts: list[int], pause: float = 0.02) -> bytes:
    """Send `data` cut at `cuts` (each piece its own read, `pause` apart); all that is answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT + 5) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before the end
            for start, end in itertools.pairwise([0, *cuts, len(data)]):
                sock.sendall(data[start:end])
                time.sleep(pause)
        answer = b""
        while chunk := sock.recv(65536):  # ends: the worker closes after its answer
            answer += chunk
    return answer


#: The most bytes of a chunked body the worker reads before it refuses one whose framing goes on:
#: the body limit (64 KiB) and the framing allowance (16 KiB), and one parse slice (16 KiB) that
#: the body shares with the head, not counted as framing.
FRAMING_BOUND = 64 * 1024 + 16 * 1024 + 16 * 1024
#: However the bytes arrive: many small reads, one read, or a read that ends where the
#: extension starts or inside it (its first slice then holds the head and part of the extension).
EXTENSION_SPLITS = {
    "in-1000-byte-reads": lambda line_start: list(range(1000, line_start + FRAMING_BOUND, 1000)),
    "in-one-write": lambda line_start: [],
    "read-ends-at-the-line-start": lambda line_start: [line_start],
    "read-ends-inside-the-line": lambda line_start: [line_start + 9000],
}


@pytest.mark.parametrize("split", list(EXTENSION_SPLITS), ids=list(EXTENSION_SPLITS))
def test_an_endless_chunk_extension_is_refused_within_the_framing_allowance(server, split):
    """llhttp reads a chunk extension of any length: the body's framing allowance bounds it. Sent
    up to the bound and no further (the client then waits), it is refused with a JSON 413 and the
    connection closed, not read on till the read timeout; the worker then serves others."""
    head = chunked(headers=[AUTH, JSON], terminate=False).replace(
        b"Connection: close", b"Connection: keep-alive"
    )
    data = head + b"1;e=" + b"a" * FRAMING_BOUND  # never ends: no CRLF
    pause = 0.002 if split == "in-1000-byte-reads" else 0.02
    answer = sent_in_pieces(server.port, data, EXTENSION_SPLITS[split](len(head)), pause)
    response_head, _, body = answer.partition(b"\r\n\r\n")
    assert response_head.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert b"Connection: close" in response_head
    record = json.loads(body)
    assert record["error"] == 413
    assert "chunk sizes, extensions and trailers" in record["message"]
    assert exchange(server.port, request("GET", "/healthz")).status == 200


def test_client_disconnecting_mid_body(server):
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(
            b"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"id": 12, "na'
        )
        sock.close()
    response = exchange(server.port, request("GET", "/healthz"))
    assert response.status == 200


@pytest.mark.parametrize("pieces", [[b"GET /healthz\r\n"], [b"GET /heal", b"thz\r", b"\n"]])
def test_a_bare_http_0_9_line_is_refused_at_once(server, pieces):
    # An HTTP/0.9 client sends its request line alone and waits: it is refused when the line ends,
    # not left to the read timeout's 408. It speaks no HTTP/1.x: the answer is read raw.
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT + 5) as sock:
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(0.05)
        answer = sock.makefile("rb").read()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert b"X-Content-Type-Options: nosniff" in head
    assert json.loads(body) == {
        "error": 400,
        "message": "Bad Request: the request's HTTP framing is malformed (HTTP/0.9 is not served).",
    }


def with_trailers(head_fields: int, head_size: int, trailers: int, trailer_size: int) -> bytes:
    """A chunked POST /plants with `head_fields` header fields and `trailers` trailer fields."""
    pad = [(f"X-Pad-{n}", "a" * head_size) for n in range(head_fields)]
    fields = b"".join(b"X-Trailer-%d: %s\r\n" % (n, b"a" * trailer_size) for n in range(trailers))
    return chunked(b"{}", headers=[AUTH, JSON, *pad], terminate=False) + b"0\r\n" + fields + b"\r\n"


#: A trailer past a head's limit is refused as one, counted with the head before it: 20 KiB of
#: head and 48 KiB of trailers pass 64 KiB (and stay within the body's framing allowance).
TRAILER_REFUSALS = {
    "bytes": (with_trailers(3, 7000, 6, 8000), "the request line, headers and trailers may take 65536 bytes"),
    "count": (with_trailers(90, 10, 10, 10), "a request may have 100 header and trailer fields"),
    "size": (with_trailers(0, 0, 1, 9000), "a trailer field may take 8190 bytes"),
}


@pytest.mark.parametrize("limit", list(TRAILER_REFUSALS))
def test_a_trailer_past_a_limit_is_a_431_that_says_trailer(server, limit):
    data, said = TRAILER_REFUSALS[limit]
    response = exchange(server.port, data)
    assert response is not None
    assert response.status == 431
    assert response.json() == {"error": 431, "message": f"Request Header Fields Too Large: {said} at most."}


#: A head just under the 64 KiB the worker buffers: ten fields of 6,000 bytes each.
NEAR_LIMIT_HEAD = request(
    body=b"{}", headers=[AUTH, JSON, *[(f"X-Filler-{n}", "a" * 6000) for n in range(10)]]
)


@pytest.mark.parametrize(
    "cut", [0, 1000, 16 * 1024], ids=["in-one-write", "in-1000-byte-pieces", "in-16-kib-pieces"]
)
def test_a_head_under_the_limit_is_read_however_it_is_split(server, cut):
    """The head's 64 KiB is counted once, whatever the reads it arrives in: the request is served."""
    assert 60_000 < len(NEAR_LIMIT_HEAD) < 64 * 1024
    cuts = list(range(cut, len(NEAR_LIMIT_HEAD), cut)) if cut else []
    answer = sent_in_pieces(server.port, NEAR_LIMIT_HEAD, cuts, pause=0.002)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]  # the body's own refusal, not a 431
    assert b'"error":400' in answer


def cut_in(head: bytes, *fields: tuple[str, int]) -> list[int]:
    """Where reads end: `offset` bytes into each named field of `head`."""
    return [head.index(name.encode()) + offset for name, offset in fields]


def test_a_head_under_the_limit_is_read_though_a_read_ends_inside_its_first_and_last_fields(server):
    """A field whose first bytes came in an earlier read is counted once: its bytes there, and the
    rest where it ends. Counted whole again there, this head under the limit was a 431."""
    cuts = cut_in(NEAR_LIMIT_HEAD, ("X-Filler-1", 50), ("X-Filler-9", 5900))
    answer = sent_in_pieces(server.port, NEAR_LIMIT_HEAD, cuts, pause=0.1)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]  # the body's own refusal, not a 431
    assert b'"error":400' in answer


#: A head just over the 64 KiB: eleven fields of 6,000 bytes each.
OVER_LIMIT_HEAD = request(
    body=b"{}", headers=[AUTH, JSON, *[(f"X-Filler-{n}", "a" * 6000) for n in range(11)]]
)


def test_a_head_over_the_limit_is_a_431_though_its_first_read_ends_inside_a_field(server):
    """The first read of a head counts whole, the part of a field it holds with it: left to the
    field's own count, those bytes were never counted, and this head over the limit was served."""
    assert len(OVER_LIMIT_HEAD) > 64 * 1024
    cuts = cut_in(OVER_LIMIT_HEAD, ("X-Filler-1", 5000))
    answer = sent_in_pieces(server.port, OVER_LIMIT_HEAD, cuts, pause=0.1)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    message = "Request Header Fields Too Large: the request line and headers may take 65536 bytes at most."
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {"error": 431, "message": message}


def test_a_field_that_has_not_ended_at_the_head_limit_is_a_431_as_it_comes(server):
    """A field still open when the head passes 64 KiB is refused then, not held (the parser keeps
    a field's bytes until its end) till the read timeout."""
    start = request("GET", "/plants").partition(b"Content-Length")[0] + b"X-Endless: "
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT + 5) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before the end
            sock.sendall(start + b"a" * (80 * 1024))
        answer = b""
        while chunk := sock.recv(65536):  # ends: the worker closes after its answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    message = "Request Header Fields Too Large: the request line and headers may take 65536 bytes at most."
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {"error": 431, "message": message}
