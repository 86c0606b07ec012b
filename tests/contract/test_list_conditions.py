"""Conditional reads of lists (RFC 9110 §13): a page of `/plants` or of the feed has an ETag and
answers If-None-Match (304) and If-Match (412) as a plant does; a watch of the feed has none, so
only `If-Match: *` holds and `If-None-Match: *` is 304. On memory and a real Redis."""

from __future__ import annotations

import re

import pytest

from app.extension import plants_state
from tests.contract.test_metrics import samples
from tests.helpers import error_of

#: Each page, and whether renaming plant 1 changes it: the feed's first event does not.
PAGES = [
    ("/plants", True),
    ("/plants?tags=fern&limit=1", True),
    ("/events", True),
    ("/events?limit=1", False),
]
STREAM = {"Accept": "text/event-stream"}


@pytest.fixture
def ferns(client, auth):
    for number, tag in ((1, "fern"), (2, "fern"), (3, None)):
        plant = {"id": number, "name": f"Plant {number}", **({"tag": tag} if tag else {})}
        assert client.post("/plants", json=plant, headers=auth).status_code == 200
    return client


@pytest.mark.parametrize(("path", "changes"), PAGES)
def test_a_page_has_an_etag_that_revalidates_until_it_changes(ferns, auth, path, changes):
    first = ferns.get(path, headers=auth)
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert re.fullmatch(r'"[0-9a-f]{40}"', etag)
    # The same page, again: the same ETag (a digest of the answer, not of the moment).
    assert ferns.get(path, headers=auth).headers["ETag"] == etag
    for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        unchanged = ferns.get(path, headers={**auth, "If-None-Match": sent})
        assert unchanged.status_code == 304, sent
        assert unchanged.get_data() == b""
        assert unchanged.headers["ETag"] == etag
    for sent in (etag, "*"):
        assert ferns.get(path, headers={**auth, "If-Match": sent}).status_code == 200
    assert ferns.get(path, headers={**auth, "If-None-Match": '"other"'}).status_code == 200
    # A change that the page shows: a new ETag, so the old one no longer revalidates.
    assert ferns.put("/plants/1", json={"name": "Renamed", "tag": "fern"}, headers=auth).status_code == 200
    changed = ferns.get(path, headers={**auth, "If-None-Match": etag})
    if not changes:
        assert changed.status_code == 304
        return
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    body = error_of(ferns.get(path, headers={**auth, "If-Match": etag}), 412)
    assert "If-Match" in body["message"]


def test_head_of_a_page_answers_its_etag_and_its_304(ferns, auth):
    etag = ferns.get("/plants", headers=auth).headers["ETag"]
    assert ferns.head("/plants", headers=auth).headers["ETag"] == etag
    assert ferns.head("/plants", headers={**auth, "If-None-Match": etag}).status_code == 304


def test_an_error_is_answered_whatever_the_preconditions(ferns, auth):
    # RFC 9110 §13.2.1: preconditions are for an answer that would be a 2xx.
    error_of(ferns.get("/plants?limit=0", headers={**auth, "If-None-Match": "*"}), 400)
    error_of(ferns.get("/events?after=forged", headers={**auth, "If-Match": '"other"'}), 400)


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/events?after=now&wait=1", {}), ("/events", STREAM)],
    ids=["long-poll", "stream"],
)
def test_a_watch_has_no_etag_so_only_the_wildcards_decide(ferns, auth, path, headers):
    state = plants_state(ferns.application)
    # If-None-Match: * on a resource that has a representation: 304 at once, no watch held.
    unchanged = ferns.get(path, headers={**auth, **headers, "If-None-Match": "*"})
    assert unchanged.status_code == 304
    assert "ETag" not in unchanged.headers
    assert unchanged.get_data() == b""
    assert state.feed_signal.watchers == 0
    # If-Match naming a tag: no watch's answer has it.
    error_of(ferns.get(path, headers={**auth, **headers, "If-Match": '"other"'}), 412)
    assert state.feed_signal.watchers == 0
    # A tag in If-None-Match never matches a watch, and If-Match: * holds: it is watched.
    for condition in ({"If-None-Match": '"other"'}, {"If-Match": "*"}):
        watched = ferns.get(path, headers={**auth, **headers, **condition})
        try:
            assert watched.status_code == 200
            assert "ETag" not in watched.headers
        finally:
            watched.close()
    assert state.feed_signal.watchers == 0


def test_head_of_a_stream_judges_its_preconditions(ferns, auth):
    assert ferns.head("/events", headers={**auth, **STREAM, "If-None-Match": "*"}).status_code == 304
    assert ferns.head("/events", headers={**auth, **STREAM, "If-Match": '"other"'}).status_code == 412


def test_a_304_of_the_feed_counts_no_event_read(ferns, auth):
    etag = ferns.get("/events", headers=auth).headers["ETag"]  # the three creates: counted
    assert ferns.get("/events", headers={**auth, "If-None-Match": etag}).status_code == 304
    error_of(ferns.get("/events", headers={**auth, "If-Match": '"other"'}), 412)
    scrape = samples(ferns.get("/metrics", headers=auth).get_data(as_text=True))
    assert scrape[("plants_events_read_total", (("route", "/events"),))] == 3
