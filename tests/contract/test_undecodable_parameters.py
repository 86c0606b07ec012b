"""Query values and path segments that are not UTF-8 once percent-decoded (`%ff`): a JSON 400
naming the parameter, on the packaged worker and on gunicorn's stock one. werkzeug keeps such bytes
percent-encoded in a query value (`?tags=%ff` read as the tag `%FF`, which `?tags=%25FF` means) and
reads them as U+FFFD in a path (`/webhooks/%ff` looked up as the id `\ufffd`)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import assert_error, call
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON_AUTH = {**AUTH, "Content-Type": "application/json"}


@pytest.fixture(scope="module", params=["memory", "stock-worker"])
def server(request, gunicorns):
    return gunicorns(request.param)


def refusal(server, method: str, path: str) -> dict:
    status, headers, body = call(server.connection(), method, path, headers=AUTH)
    return assert_error(status, headers, body, 400)


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/plants?tags=%ff", "tags"),
        ("/plants?tags=fern&tags=caf%C3", "tags"),  # a UTF-8 sequence cut short
        ("/plants?limit=%ff", "limit"),
        ("/plants?after=%80", "after"),
        ("/events?tags=%ff", "tags"),
        ("/events?ids=%ff", "ids"),
        ("/events?types=%ff", "types"),
        ("/events?wait=%ff", "wait"),
        ("/events?after=%ed%a0%80", "after"),  # an encoded surrogate: not UTF-8
        ("/events?snapshot=%ff", "snapshot"),
        ("/events?ticket=%ff", "ticket"),
        ("/plants/%ff", "id"),
        ("/webhooks/%ff", "endpoint_id"),
        ("/webhooks/%ff/attempts", "endpoint_id"),
    ],
)
def test_a_value_that_is_not_utf8_is_400_naming_its_parameter(server, path, named):
    error = refusal(server, "GET", path)
    assert list(error["details"]) == [named]
    assert error["details"][named][0].startswith("Not UTF-8 once percent-decoded")


def test_several_are_each_named_and_an_unknown_name_stays_unknown(server):
    error = refusal(server, "GET", "/events?tags=%ff&limit=%fe&wait=5&bogus=%ff")
    assert set(error["details"]) == {"tags", "limit", "bogus"}
    assert error["details"]["bogus"] == ["Unknown parameter."]


def test_a_tag_written_as_percent_ff_is_found_by_its_encoding_and_never_by_a_bad_byte(server):
    """`%FF` is a tag like any other, asked for as `%25FF`; `%ff` is a byte, refused: it was read as
    the same tag, so a client that sent a bad byte was answered another tag's plants."""
    body = json.dumps({"id": 731_001, "name": "Literal", "tag": "%FF"})
    status, _, _ = call(server.connection(), "POST", "/plants", body, JSON_AUTH)
    assert status == 200
    status, _, listed = call(server.connection(), "GET", "/plants?tags=%25FF", headers=AUTH)
    assert (status, json.loads(listed)["plants"]) == (200, [{"id": 731_001, "name": "Literal", "tag": "%FF"}])
    assert refusal(server, "GET", "/plants?tags=%ff")["details"].keys() == {"tags"}
    status, _, listed = call(server.connection(), "GET", "/plants?tags=caf%C3%A9", headers=AUTH)
    assert (status, json.loads(listed)) == (200, {"plants": []})  # UTF-8, read as written


def test_a_change_to_a_path_that_is_not_utf8_is_refused_and_changes_nothing(server):
    body = json.dumps({"id": 731_002, "name": "Kept"})
    assert call(server.connection(), "POST", "/plants", body, JSON_AUTH)[0] == 200
    assert refusal(server, "DELETE", "/plants/731002%ff")["details"].keys() == {"id"}
    assert refusal(server, "DELETE", "/webhooks/wh_%ff")["details"].keys() == {"endpoint_id"}
    status, _, kept = call(server.connection(), "GET", "/plants/731002", headers=AUTH)
    assert (status, json.loads(kept)["name"]) == (200, "Kept")


#: A query none of these operations takes: unknown names, a value that is not UTF-8, a cache-buster.
IGNORED = "?bogus=%ff&_=1700000000&ticket"


@pytest.mark.parametrize(
    ("method", "path", "kept"),
    [
        ("GET", "/openapi.json", True),
        ("GET", "/plants/731003", True),
        ("GET", "/webhooks", True),
        ("GET", "/metrics", False),  # its counts move between the two
        ("POST", "/events/tickets", False),  # a new ticket each time
    ],
)
def test_an_operation_that_takes_no_query_parameters_does_not_read_the_query(server, method, path, kept):
    """The decision (README, the document): an operation that takes query parameters refuses an
    unknown one and a value that is not UTF-8; one that takes none reads nothing of its query, so
    nothing there is read as what was not sent, and a client's cache-buster or a scraper's own
    parameters are answered as without them."""
    body = json.dumps({"id": 731_003, "name": "Queried"})
    assert call(server.connection(), "POST", "/plants", body, JSON_AUTH)[0] == 200
    plain = call(server.connection(), method, path, headers=AUTH)
    queried = call(server.connection(), method, path + IGNORED, headers=AUTH)
    assert (queried[0], queried[1]["Content-Type"]) == (200, plain[1]["Content-Type"])
    assert plain[0] == 200
    if kept:
        assert queried[2] == plain[2]


def test_a_delete_with_a_query_it_does_not_take_deletes(server):
    body = json.dumps({"id": 731_004, "name": "Deleted"})
    assert call(server.connection(), "POST", "/plants", body, JSON_AUTH)[0] == 200
    assert call(server.connection(), "DELETE", "/plants/731004" + IGNORED, headers=AUTH)[0] == 204
    assert call(server.connection(), "GET", "/plants/731004", headers=AUTH)[0] == 404
