"""A plant whose name or tag holds a line end beyond ASCII (U+0085, U+2028, U+2029) reaches a
client that splits the stream with Python's `str.splitlines()` whole: the service sends those
characters as JSON escapes in a server-sent event's `data:` line (app/watch/event_data.py), for
the live events and for a snapshot's `plant.existing` blocks alike, through the packaged worker."""

from __future__ import annotations

import json

import pytest

from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Each with one of the three in its name and another in its tag, among other non-ASCII text.
PLANTS = {
    1: {"id": 1, "name": "Fern\u2028of the second line", "tag": "sh\u00e4de\x85"},
    2: {"id": 2, "name": "Moss\u2029\U0001f33f", "tag": "\u2028deep"},
    3: {"id": 3, "name": "Ivy\x85next", "tag": "wall\u2029"},
}


@pytest.fixture(scope="module")
def server():
    # A stream ends after a second by itself: the test reads each one to its end.
    server = Gunicorn(env={"PLANTS_EVENTS_STREAM_MAX": "1", "GUNICORN_THREADS": "1"})
    yield server
    server.stop()


def stream_text(server: Gunicorn, path: str) -> str:
    """The whole body of a stream of the feed, decoded."""
    conn = server.connection()
    conn.request("GET", path, headers={**AUTH, "Accept": "text/event-stream"})
    response = conn.getresponse()
    assert response.status == 200
    text = response.read().decode()
    conn.close()
    return text


def plants_in(text: str, event: str) -> list[dict]:
    """The plants of the blocks named `event`, read by a strict client: lines split by
    `str.splitlines()`, each a comment or a `name: value` field, each block's data JSON."""
    plants, fields = [], {}
    for line in text.splitlines():
        if not line:
            if fields.get("event") == event:
                plants.append(json.loads(fields["data"])["plant"])
            fields = {}
            continue
        name, separator, value = line.partition(": ")
        assert separator, f"a line that is neither a field nor a comment: {line!r}"
        fields[name] = value
    return plants


def test_line_ends_beyond_ascii_in_a_stream_are_escaped_and_each_event_parses_whole(server):
    conn = server.connection()
    conn.request("GET", "/events?after=now", headers=AUTH)
    cursor = json.loads(conn.getresponse().read())["next"]
    for plant in PLANTS.values():
        body = json.dumps({"name": plant["name"], "tag": plant["tag"]})
        conn.request("PUT", f"/plants/{plant['id']}", body, {**AUTH, "Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 201, response.read()
        response.read()
    conn.close()

    live = stream_text(server, f"/events?after={cursor}")
    assert plants_in(live, "plant.created") == list(PLANTS.values())
    snapshot = stream_text(server, "/events?snapshot=true")
    existing = sorted(plants_in(snapshot, "plant.existing"), key=lambda plant: plant["id"])
    assert existing == list(PLANTS.values())
    for text in (live, snapshot):
        # As JSON escapes, which every JSON parser reads as the characters themselves.
        assert not {"\x85", "\u2028", "\u2029"} & set(text)
        assert all(escape in text for escape in ("\\u0085", "\\u2028", "\\u2029"))
        assert "sh\u00e4de" in text  # the rest stays raw UTF-8
        assert "\U0001f33f" in text
