"""A stream's heartbeats on a real gunicorn: a stream, plain or filtered, is never quiet for longer
than PLANTS_EVENTS_HEARTBEAT (the promise a proxy's read timeout rests on, docs/change-feed.md),
from its opening to its end, two streams opened together alike."""

from __future__ import annotations

import itertools
import socket
import threading
import time

import pytest

from tests.integration.test_watch import open_stream
from tests.servers import Gunicorn

HEARTBEAT = 3
#: Two heartbeats each at least, then the end.
STREAM_MAX = 8
#: The worker looks for streams whose heartbeat is due four times a second; a loaded machine may
#: hand the beat to a request thread later still.
LAG = 2.0


@pytest.fixture(scope="module")
def server():
    server = Gunicorn(
        env={"PLANTS_EVENTS_HEARTBEAT": str(HEARTBEAT), "PLANTS_EVENTS_STREAM_MAX": str(STREAM_MAX)}
    )
    yield server
    server.stop()


def arrivals(sock: socket.socket, into: list[tuple[float, bytes]]) -> None:
    """Each chunk the stream sends, with when it came (time.monotonic()), until its end."""
    sock.settimeout(STREAM_MAX + 10)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return
        into.append((time.monotonic(), chunk))
        data += chunk


def beats(received: list[tuple[float, bytes]], marker: bytes) -> list[float]:
    return [at for at, chunk in received if marker in chunk]


#: A plain stream's heartbeat is a comment; a filtered stream's, a bookmark.
KINDS = [("", b": keep-alive"), ("?tags=hb-none", b"event: bookmark")]


@pytest.mark.parametrize(("query", "marker"), KINDS, ids=["plain", "filtered"])
def test_streams_opened_together_are_never_quiet_for_longer_than_the_heartbeat(server, query, marker):
    opened = time.monotonic()
    socks = [open_stream(server, path=f"/events{query}") for _ in range(2)]
    received: list[list[tuple[float, bytes]]] = [[], []]
    pairs = zip(socks, received, strict=True)
    readers = [threading.Thread(target=arrivals, args=pair) for pair in pairs]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(STREAM_MAX + 20)
    for sock in socks:
        sock.close()
    for got in received:
        assert got
        assert got[0][1].startswith(b"HTTP/1.1 200 "), got[:1]
        assert b"".join(chunk for _, chunk in got).endswith(b"\r\n0\r\n\r\n"), got  # ended, at STREAM_MAX
        times = [opened, *beats(got, marker), got[-1][0]]
        assert len(times) >= 4, got  # two heartbeats at least
        # Never quiet for longer than the interval (with the worker's lag): nor before the first.
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert max(gaps) <= HEARTBEAT + LAG, gaps
