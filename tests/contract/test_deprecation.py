"""A deprecated operation is announced from the served document alone (app/plants/deprecation.py):
an app whose document marks getPlant `deprecated: true` answers it with RFC 9745's Deprecation,
RFC 8594's Sunset and a Link rel="deprecation", and counts its use; the other operations say nothing."""

from __future__ import annotations

import copy
import datetime
import os
import subprocess
import sys

import pytest

from app import create_app
from app.plants import deprecation, docs
from tests.contract.test_metrics import samples
from tests.servers import ROOT, TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SINCE = datetime.date(2026, 11, 27)
SUNSET = "2027-06-01"


@pytest.fixture
def marked(monkeypatch):
    """The shipped document with one operation marked deprecated, as an operator's edit would."""
    shipped = docs.shipped_document()

    def document(extra: dict) -> None:
        edited = copy.deepcopy(shipped)
        edited["paths"]["/plants/{id}"]["get"].update({"deprecated": True, **extra})
        monkeypatch.setattr(docs, "shipped_document", lambda: edited)
        deprecation.table.cache_clear()
        docs.document_bytes.cache_clear()

    yield document
    monkeypatch.undo()  # the shipped document again, and the table it makes (empty) for later apps
    deprecation.table.cache_clear()
    docs.document_bytes.cache_clear()


def test_a_page_on_a_listed_origin_may_read_the_announcement(marked):
    """A browser hands a cross-origin page only the headers the answer exposes: the deprecation
    reaches a page as it reaches every other client."""
    marked({"x-deprecated-since": SINCE, "x-sunset": SUNSET})
    origin = "http://127.0.0.1:5173"
    client = create_app(
        {"TESTING": True, "PLANTS_API_TOKENS": TOKEN, "PLANTS_CORS_ORIGINS": origin}
    ).test_client()
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH)
    response = client.get("/plants/1", headers={**AUTH, "Origin": origin})
    assert response.headers["Access-Control-Allow-Origin"] == origin
    exposed = {name.lower() for name in response.headers["Access-Control-Expose-Headers"].split(", ")}
    assert {"deprecation", "sunset", "link"} <= exposed
    assert response.headers["Sunset"] == "Tue, 01 Jun 2027 00:00:00 GMT"


def test_a_deprecated_operation_announces_its_deprecation_and_sunset(marked):
    marked({"x-deprecated-since": SINCE, "x-sunset": SUNSET})
    client = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN}).test_client()
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 200
    for method, plant_id, status in [("GET", 1, 200), ("HEAD", 1, 200), ("GET", 2, 404)]:
        response = client.open(f"/plants/{plant_id}", method=method, headers=AUTH)
        assert response.status_code == status
        since = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)
        assert response.headers["Deprecation"] == f"@{int(since.timestamp())}"  # RFC 9745: a Date
        assert response.headers["Sunset"] == "Tue, 01 Jun 2027 00:00:00 GMT"  # RFC 8594: an HTTP-date
        assert response.headers.get_all("Link") == [
            '</openapi.json>; rel="deprecation"; type="application/json"'
        ]
    # The operations the document does not mark say nothing.
    created = client.post("/plants", json={"id": 3, "name": "Palm"}, headers=AUTH)
    assert "Deprecation" not in created.headers
    assert "Sunset" not in created.headers
    listed = client.get("/plants", headers=AUTH)
    assert "Deprecation" not in listed.headers
    # The served document says so too, and the metric counts each use.
    served = client.get("/openapi.json").get_json()["paths"]["/plants/{id}"]["get"]
    assert (served["deprecated"], served["x-sunset"], served["x-deprecated-since"]) == (
        True,
        SUNSET,
        "2026-11-27",
    )
    scrape = samples(client.get("/metrics", headers=AUTH).get_data(as_text=True))
    assert scrape[("plants_deprecated_requests_total", (("operation", "getPlant"),))] == 3
    assert not any(name == "plants_deprecated_requests_total" and labels != (("operation", "getPlant"),)
                   for name, labels in scrape)  # fmt: skip


def test_an_apps_announcements_are_its_own_whatever_apps_come_after_it(marked, monkeypatch):
    """Each app keeps the announcements of the document it was built with: a later app in the same
    process (a host's second app, a test's) neither takes nor clears the first one's."""
    marked({"x-deprecated-since": SINCE})
    first = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN}).test_client()
    monkeypatch.undo()  # the shipped document, nothing deprecated, for the next app
    deprecation.table.cache_clear()
    docs.document_bytes.cache_clear()
    second = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN}).test_client()
    assert "Deprecation" in first.get("/plants/1", headers=AUTH).headers
    assert "Deprecation" not in second.get("/plants/1", headers=AUTH).headers


def test_its_link_names_the_notice_when_the_document_gives_one(marked):
    marked({"x-deprecated-since": "2026-11-27", "x-deprecation-link": "https://example.com/plants-v2"})
    client = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN}).test_client()
    response = client.get("/plants/1", headers=AUTH)
    assert response.headers.get_all("Link") == [
        '<https://example.com/plants-v2>; rel="deprecation"; type="text/html"'
    ]
    assert "Sunset" not in response.headers  # no date set yet: served until one is announced


def test_a_deprecation_without_its_date_stops_the_start(marked):
    marked({})
    with pytest.raises(ValueError, match="getPlant is deprecated: x-deprecated-since must be a date"):
        create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN})


@pytest.mark.parametrize(
    ("since", "sunset", "earliest"),
    [
        ("2026-11-27", "2027-05-26", "2027-05-27"),
        ("2026-08-31", "2027-02-27", "2027-02-28"),  # no 31st in February: its last day
        ("2026-11-27", "2026-11-27", "2027-05-27"),
    ],
)
def test_a_sunset_earlier_than_six_months_after_the_deprecation_stops_the_start(
    marked, since, sunset, earliest
):
    """docs/versions.md: a deprecated operation is served at least six months more."""
    marked({"x-deprecated-since": since, "x-sunset": sunset})
    with pytest.raises(deprecation.DocumentError) as refused:
        create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN})
    assert str(refused.value) == (
        f"getPlant is deprecated: its x-sunset {sunset} is earlier than six months after its"
        f" x-deprecated-since {since} (docs/versions.md); the earliest is {earliest}"
    )


@pytest.mark.parametrize(("since", "sunset"), [("2026-11-27", "2027-05-27"), ("2026-08-31", "2027-02-28")])
def test_a_sunset_six_months_after_the_deprecation_is_announced(marked, since, sunset):
    marked({"x-deprecated-since": since, "x-sunset": sunset})
    client = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN}).test_client()
    expected = datetime.date.fromisoformat(sunset).strftime("%a, %d %b %Y 00:00:00 GMT")
    assert client.get("/plants/1", headers=AUTH).headers["Sunset"] == expected


def test_the_start_says_so_in_one_line():
    """Started as gunicorn starts a worker (importing wsgi.py), with such an edit of the document
    (made to the parsed document, which the app reads once): one line, no traceback."""
    edit = {"deprecated": True, "x-deprecated-since": "2026-11-27", "x-sunset": "2027-01-01"}
    loader = (
        "from app.plants import docs; "
        f"docs.shipped_document()['paths']['/plants/{{id}}']['get'].update({edit!r}); import wsgi"
    )
    result = subprocess.run(
        [sys.executable, "-c", loader],
        cwd=ROOT, env={**os.environ, "PLANTS_API_TOKENS": TOKEN}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "Plant Store: the interface document is refused: getPlant is deprecated: its x-sunset 2027-01-01 is"
        " earlier than six months after its x-deprecated-since 2026-11-27 (docs/versions.md); the earliest"
        " is 2027-05-27"
    ]


def test_the_shipped_document_deprecates_nothing_yet():
    assert deprecation.table() == {}
