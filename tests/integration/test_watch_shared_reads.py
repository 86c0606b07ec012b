"""The watch's shared reads are bounded (issue 48, item 2): streams opened with `Last-Event-ID` at
hundreds of distinct positions, each read once and closed with no write between, leave nothing
where one stream stood alone, and at most the bound's entries where two stood together. Counted
by the worker's own gauge (`plants_watch_shared_reads`), on a real gunicorn."""

from __future__ import annotations

import json
import socket

from app.watch.shared_reads import MAX_BYTES, MAX_ENTRIES
from tests.helpers import call
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Enough that the pairs which meet (the first of a pair may have read and moved on before the
#: second arrives: then each reads alone) are more than the bound.
POSITIONS = 2 * MAX_ENTRIES


def open_at(port: int, cursor: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        f"GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Accept: text/event-stream\r\nLast-Event-ID: {cursor}\r\n\r\n".encode()
    )
    return sock


def first_event(sock: socket.socket) -> None:
    data = b""
    while b"\nid: " not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk


def kept(server: Gunicorn) -> tuple[float, float]:
    status, _, body = call(server.connection(), "GET", "/metrics", None, AUTH)
    assert status == 200
    values = dict(
        line.split(" ", 1)
        for line in body.decode().splitlines()
        if line.startswith("plants_watch_shared_read")
    )
    return float(values["plants_watch_shared_reads"]), float(values["plants_watch_shared_read_bytes"])


def test_streams_at_distinct_positions_leave_the_shared_reads_at_their_bound():
    server = Gunicorn()
    try:
        headers = {**AUTH, "Content-Type": "application/json"}
        for plant_id in range(1, POSITIONS + 2):
            assert (
                call(server.connection(), "POST", "/plants", {"id": plant_id, "name": "p"}, headers)[0] == 200
            )
        cursors, after = [], ""
        for _ in range(POSITIONS):  # the cursor after each event: a distinct position each
            page = json.loads(call(server.connection(), "GET", f"/events?limit=1{after}", None, AUTH)[2])
            cursors.append(page["next"])
            after = f"&after={page['next']}"
        for cursor in cursors:  # one stream at each: it reads on its own
            sock = open_at(server.port, cursor)
            first_event(sock)
            sock.close()
        # Nothing of where each started; at most the end, where a closing stream and the next met.
        assert kept(server)[0] <= 1
        for cursor in cursors:  # two at each: their read is shared, and kept within the bound
            pair = [open_at(server.port, cursor), open_at(server.port, cursor)]
            for sock in pair:
                first_event(sock)
            for sock in pair:
                sock.close()
        entries, size = kept(server)
        assert entries == MAX_ENTRIES  # shared, and the least recently used dropped
        assert size <= MAX_BYTES
    finally:
        server.stop()
