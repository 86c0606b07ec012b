"""docs/change-feed.md's browser example (a watch ticket, `EventSource` and `snapshot=true`
keeping the plants tagged `indoor` in a list) in headless Chromium, served from another origin,
against a real gunicorn: the list equals `GET /plants?tags=indoor` after plants are created,
moved in and out of the tag and deleted, across streams' ends and tickets' expiry."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from tests.chromium import start_chromium, wait
from tests.helpers import call, static_origin
from tests.integration.test_browser_page import hold_the_tokens_one_watch, short_memory_service
from tests.servers import ROOT, TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def documented_code() -> str:
    text = (ROOT / "docs" / "change-feed.md").read_text("utf-8")
    section = text.split("**In a browser**: a page that keeps", 1)[1]
    return section.split("```js\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def page_dir_and_origin(tmp_path):
    with static_origin(tmp_path) as origin:
        yield tmp_path, origin


def put(port: int, plant_id: int, name: str, tag: str | None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    status, _, body = call(conn, "PUT", f"/plants/{plant_id}", {"name": name, "tag": tag}, AUTH)
    assert status in (200, 201), body


def delete(port: int, plant_id: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    assert call(conn, "DELETE", f"/plants/{plant_id}", None, AUTH)[0] == 204


def indoor_names(port: int) -> list[str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    status, _, body = call(conn, "GET", "/plants?tags=indoor&limit=1000", None, AUTH)
    assert status == 200
    return sorted(plant["name"] for plant in json.loads(body)["plants"])


def write_page(page_dir, port: int, token: str) -> None:
    """The documented code on a page of its own, given the service's port and `token`."""
    code = documented_code().replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}")
    code = code.replace('"change-me"', json.dumps(token))
    page = f'<!doctype html><meta charset="utf-8"><title>indoor</title><ul id="plants"></ul><script>{code}'
    (page_dir / "index.html").write_text(page + "</script>", "utf-8")


def listed(driver) -> list[str]:
    # Read in one script: the page redraws the list as events come, and an item found before a
    # redraw is stale by the time its text is asked for.
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll('#plants li'), li => li.textContent)"
    )
    return sorted(text.strip() for text in texts)


def test_the_documented_page_keeps_a_filtered_list_in_chromium(page_dir_and_origin, monkeypatch):
    page_dir, origin = page_dir_and_origin
    server = Gunicorn(
        env={
            "PLANTS_CORS_ORIGINS": origin,
            "PLANTS_EVENTS_HEARTBEAT": "1",
            "PLANTS_EVENTS_STREAM_MAX": "2",  # streams end and tickets expire within the test
            "PLANTS_WATCH_TICKET_TTL": "3",
        }
    )
    driver = start_chromium(monkeypatch)
    try:
        port = server.port
        for n in range(6):  # the snapshot's plants, and others it leaves out
            put(port, 760_000 + n, f"before-{n}", "indoor" if n % 2 else "outdoor")
        write_page(page_dir, port, TOKEN)
        driver.get(f"{origin}/index.html")
        wait(driver, 20).until(lambda _: listed(driver) == indoor_names(port))
        assert listed(driver) == ["before-1", "before-3", "before-5"]
        changes = [  # about 6 s of them: streams of 2 s end, tickets of 3 s expire
            (760_000, "indoor"),  # moves in
            (760_001, "outdoor"),  # moves out
            (760_003, None),  # deleted
            (760_006, "indoor"),  # created
            (760_005, "indoor"),  # renamed
            (760_002, None),  # deleted, never listed
            (760_006, "outdoor"),  # moves out again
            (760_007, "indoor"),
            (760_000, "indoor"),
            (760_007, None),
            (760_008, "outdoor"),
            (760_008, "indoor"),
        ]
        for step, (plant_id, tag) in enumerate(changes):
            if tag is None:
                delete(port, plant_id)
            else:
                put(port, plant_id, f"step-{step}", tag)
            time.sleep(0.5)
        put(port, 760_099, "last", "indoor")
        wait(driver, 20).until(lambda _: listed(driver) == indoor_names(port))
        assert "last" in listed(driver)
        errors = [entry for entry in driver.get_log("browser") if "CORS" in entry["message"]]
        assert errors == []
    finally:
        driver.quit()
        server.stop()


PAGE_TOKEN = "page-token"


def test_a_refused_mint_waits_for_retry_after_and_never_opens_a_source_without_a_ticket(
    page_dir_and_origin, monkeypatch
):
    """The documented page's mint refused (429: its token past its rate limit) opens no
    `EventSource` with no ticket (`ticket=undefined`: a 400 a second, each counted against the
    address's refused authentications), and the page goes on once the limit allows it."""
    page_dir, origin = page_dir_and_origin
    server = Gunicorn(
        env={
            "PLANTS_CORS_ORIGINS": origin,
            "PLANTS_API_TOKENS": f"{TOKEN},{PAGE_TOKEN}@5/10second",
            "PLANTS_EVENTS_STREAM_MAX": "2",  # the stream ends: the page reconnects within the hog
        }
    )
    driver = start_chromium(monkeypatch)
    try:
        port = server.port
        put(port, 761_000, "before", "indoor")
        write_page(page_dir, port, PAGE_TOKEN)
        driver.get(f"{origin}/index.html")
        wait(driver, 20).until(lambda _: listed(driver) == ["before"])
        # Another client spends the page's token's every request for 9 s: the page's reconnection
        # and its mints of a new ticket are 429.
        auth = {"Authorization": f"Bearer {PAGE_TOKEN}"}
        refused, until = 0, time.monotonic() + 9
        while time.monotonic() < until:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
            refused += call(conn, "GET", "/plants/1", None, auth)[0] == 429
            time.sleep(0.05)
        assert refused
        put(port, 761_001, "after", "indoor")
        wait(driver, 30).until(lambda _: listed(driver) == ["after", "before"])
        unauthenticated = [
            line
            for line in server.output().splitlines()
            if "/events?" in line and ('" 401 ' in line or '" 400 ' in line)
        ]
        assert unauthenticated == []
    finally:
        driver.quit()
        server.stop()


def test_a_source_refused_past_the_watcher_cap_is_opened_again_later_each_time(
    page_dir_and_origin, monkeypatch
):
    """The documented page's source refused (429 past PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN) while
    its mints succeed is opened again after a doubling delay, not a mint and a source a second,
    and the page fills its list once the token's other watch ends."""
    page_dir, origin = page_dir_and_origin
    server = Gunicorn(env={"PLANTS_CORS_ORIGINS": origin, "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "1"})
    driver = start_chromium(monkeypatch)
    held = http.client.HTTPConnection("127.0.0.1", server.port, timeout=15)
    try:
        put(server.port, 762_000, "indoor fern", "indoor")
        held.request("GET", "/events?after=now", headers={**AUTH, "Accept": "text/event-stream"})
        stream = held.getresponse()  # kept: the token's one watch
        assert stream.status == 200
        write_page(page_dir, server.port, TOKEN)
        driver.get(f"{origin}/index.html")
        minted = '"POST /events/tickets HTTP/1.1" 200'
        deadline = time.monotonic() + 30  # the page's first mint, however slowly it loads
        while minted not in server.output():
            assert time.monotonic() < deadline, "the page minted no ticket"
            time.sleep(0.1)
        time.sleep(10)  # the time its later mints take: they would come a second apart if not backed off
        mints = server.output().count(minted)
        assert mints <= 5, mints  # 1, 2, 4 s apart: not one a second (about 10)
        assert listed(driver) == []

        stream.close()  # the token's other watch ends
        held.close()
        wait(driver, 40).until(lambda _: listed(driver) == ["indoor fern"])
    finally:
        held.close()
        driver.quit()
        server.stop()


def test_a_page_away_longer_than_the_feed_keeps_starts_over_with_a_snapshot(page_dir_and_origin, monkeypatch):
    """The documented page's sources refused (past the token's watcher cap here; a laptop asleep
    alike) while more events were written than the feed keeps: its position is a 410, which
    EventSource cannot read, so every source was refused and its list stale for good. It asks
    the feed before each new source and starts over with a snapshot."""
    page_dir, origin = page_dir_and_origin
    server = short_memory_service(origin)
    driver = start_chromium(monkeypatch)
    held = None
    try:
        put(server.port, 763_000, "indoor fern", "indoor")
        write_page(page_dir, server.port, TOKEN)
        driver.get(f"{origin}/index.html")
        wait(driver, 20).until(lambda _: listed(driver) == ["indoor fern"])
        held = hold_the_tokens_one_watch(server.port)
        for plant_id in range(763_001, 763_021):  # twice what the feed keeps
            put(server.port, plant_id, f"indoor {plant_id}", "indoor")
        held.close()  # the page's next source may open, from a position no longer kept
        wait(driver, 60).until(lambda _: listed(driver) == indoor_names(server.port))
        put(server.port, 763_100, "watched again", "indoor")
        wait(driver, 20).until(lambda _: "watched again" in listed(driver))
    finally:
        if held is not None:
            held.close()
        driver.quit()
        server.stop()
