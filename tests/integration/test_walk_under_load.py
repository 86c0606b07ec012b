"""The walk guarantee on a real gunicorn (two workers on Redis): a walk of small pages while other
clients create and delete sees every plant present for the whole walk exactly once."""

from __future__ import annotations

import json
import random
import threading
from urllib.parse import parse_qs, urlsplit

from tests.helpers import call
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
BASE = 7_000_000_000
#: Plants present for the whole walk: even offsets. Created and deleted meanwhile: odd ones.
STABLE = [BASE + 2 * n for n in range(400)]
CHURN = [BASE + 2 * n + 1 for n in range(400)]


def churn(server, stop: threading.Event, seed: int, counts: list[int]) -> None:
    """Create and delete churn ids until stopped (at most 20,000 rounds)."""
    rng = random.Random(seed)
    done = 0
    while not stop.is_set() and done < 20_000:
        plant_id = rng.choice(CHURN)
        plant = {"id": plant_id, "name": "churn", "tag": "walk"}
        assert call(server.connection(), "POST", "/plants", plant, AUTH)[0] == 200
        # 404 when another churner deleted it first.
        assert call(server.connection(), "DELETE", f"/plants/{plant_id}", None, AUTH)[0] in (204, 404)
        done += 1
    counts.append(done)


def test_a_walk_under_creates_and_deletes_sees_each_stable_plant_once(gunicorn):
    for plant_id in STABLE:
        plant = {"id": plant_id, "name": "stable", "tag": "walk"}
        assert call(gunicorn.connection(), "POST", "/plants", plant, AUTH)[0] == 200
    stop = threading.Event()
    counts: list[int] = []
    churners = [threading.Thread(target=churn, args=(gunicorn, stop, seed, counts)) for seed in range(3)]
    for thread in churners:
        thread.start()
    try:
        seen: list[int] = []
        pages = 0
        url = "/plants?tags=walk&limit=7"
        while url:
            status, headers, body = call(gunicorn.connection(), "GET", url, None, AUTH)
            assert status == 200, body
            page = json.loads(body)
            ids = [item["id"] for item in page["plants"]]
            assert ids == sorted(ids)
            assert not seen or ids[0] > seen[-1]  # pages follow on in order, never repeating
            seen += ids
            pages += 1
            # Follow the Link header: the next page may be served by the other worker.
            link = headers["Link"]
            assert (link is None) == ("next" not in page)
            if link is not None:
                next_url = urlsplit(link.removeprefix("<").removesuffix('>; rel="next"'))
                assert next_url.netloc == f"127.0.0.1:{gunicorn.port}"
                assert parse_qs(next_url.query) == {"tags": ["walk"], "limit": ["7"], "after": [page["next"]]}
            url = f"{next_url.path}?{next_url.query}" if link is not None else None
    finally:
        stop.set()
        for thread in churners:
            thread.join(30)
            assert not thread.is_alive()
    assert len(seen) == len(set(seen))
    assert [plant_id for plant_id in seen if plant_id in set(STABLE)] == STABLE
    assert set(seen) <= set(STABLE) | set(CHURN)
    assert pages >= len(STABLE) // 7
    assert sum(counts) >= 50  # the churn really ran during the walk


CHANGED = [BASE + 10_000 + n for n in range(300)]


def change(server, stop: threading.Event, seed: int, counts: list[int]) -> None:
    """Rename and retag the CHANGED plants until stopped (at most 20,000 changes)."""
    rng = random.Random(seed)
    done = 0
    while not stop.is_set() and done < 20_000:
        plant_id = rng.choice(CHANGED)
        patch = {"name": f"renamed {done}", "tag": rng.choice(["walk-a", "walk-b"])}
        assert call(server.connection(), "PATCH", f"/plants/{plant_id}", patch, AUTH)[0] == 200
        done += 1
    counts.append(done)


def test_a_walk_while_every_plant_changes_sees_each_once(gunicorn):
    for plant_id in CHANGED:
        plant = {"id": plant_id, "name": "original", "tag": "walk-a"}
        assert call(gunicorn.connection(), "PUT", f"/plants/{plant_id}", plant, AUTH)[0] in (200, 201)
    stop = threading.Event()
    counts: list[int] = []
    changers = [threading.Thread(target=change, args=(gunicorn, stop, seed, counts)) for seed in range(3)]
    for thread in changers:
        thread.start()
    try:
        walks = {}
        for query in ("limit=7", "tags=walk-a&tags=walk-b&limit=7"):
            seen: list[int] = []
            url = f"/plants?{query}"
            while url:
                status, headers, body = call(gunicorn.connection(), "GET", url, None, AUTH)
                assert status == 200, body
                page = json.loads(body)
                seen += [item["id"] for item in page["plants"] if item["id"] in set(CHANGED)]
                for item in page["plants"]:
                    if item["id"] in set(CHANGED):
                        # A tagged page shows each plant under the tag it had when the page was read.
                        assert item["tag"] in ("walk-a", "walk-b")
                link = headers["Link"]
                url = link.removeprefix("<").removesuffix('>; rel="next"') if link else None
                if url:
                    url = url.split(f":{gunicorn.port}", 1)[1]
            walks[query] = seen
    finally:
        stop.set()
        for thread in changers:
            thread.join(30)
            assert not thread.is_alive()
    # Every changed plant existed for the whole walk: each seen exactly once, in order.
    assert walks["limit=7"] == CHANGED
    assert walks["tags=walk-a&tags=walk-b&limit=7"] == CHANGED
    assert sum(counts) >= 50  # the changes really ran during the walks
