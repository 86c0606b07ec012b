"""A stream's heartbeats on a real gunicorn: never further apart than PLANTS_EVENTS_HEARTBEAT (the
promise a proxy's read timeout rests on), and streams opened together do not beat together, so
that a crowd of them opened at once (clients started together, or reconnecting after a restart)
does not take the worker's request threads in one burst at each interval."""

from __future__ import annotations

import itertools
import socket
import threading
import time

import pytest

from tests.integration.test_watch import open_stream
from tests.servers import Gunicorn

HEARTBEAT = 6
#: Two heartbeats each at least, then the end.
STREAM_MAX = 14
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
def test_streams_opened_together_each_beat_within_the_interval_and_not_together(server, query, marker):
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
    firsts = [beats(got, marker)[0] for got in received]
    # Opened within milliseconds of each other, their first heartbeats come apart (at the same
    # interval, they came in the same turn of the worker).
    assert abs(firsts[0] - firsts[1]) >= 0.5, firsts
