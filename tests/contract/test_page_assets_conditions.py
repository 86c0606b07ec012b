"""The API page's assets (`/docs/assets/...`, files with an ETag and a Last-Modified) judge a
request's conditions as every other answer of the service does (RFC 9110 §13, §14.2): a failed
`If-Match` is the JSON `Error` 412, `If-Match: *` holds (the file is there), and a `Range` in a
unit other than bytes (or a list of ranges) is ignored. On the packaged worker and on gunicorn's
stock gthread worker."""

from __future__ import annotations

from tests.helpers import assert_error, call

ASSET = "/docs/assets/swagger-ui.css"


def asset(server, headers: dict[str, str], method: str = "GET"):
    return call(server.connection(), method, ASSET, None, headers)


def test_an_asset_whose_if_match_fails_is_the_json_412(either_worker):
    for method in ("GET", "HEAD"):
        status, headers, body = asset(either_worker, {"If-Match": '"not-its-tag"'}, method)
        assert status == 412
        assert headers["Content-Type"] == "application/json"
        if method == "GET":
            assert_error(status, headers, body, 412)


def test_an_asset_holds_if_match_star_and_its_own_tag(either_worker):
    status, headers, whole = asset(either_worker, {})
    assert status == 200
    for value in ("*", headers["ETag"]):
        status, matched_headers, body = asset(either_worker, {"If-Match": value})
        assert (status, matched_headers["Content-Type"], body) == (200, "text/css; charset=utf-8", whole)


def test_an_asset_ignores_a_range_in_another_unit(either_worker):
    status, _, whole = asset(either_worker, {})
    assert status == 200
    for ignored in ("items=0-1", "bytes=0-1,3-4"):
        status, headers, body = asset(either_worker, {"Range": ignored})
        assert (status, body) == (200, whole)
        assert "Content-Range" not in headers
    # A byte range is still served, and a revalidation is still a 304.
    status, headers, body = asset(either_worker, {"Range": "bytes=0-1"})
    assert (status, headers["Content-Range"], body) == (206, f"bytes 0-1/{len(whole)}", whole[:2])
    etag = asset(either_worker, {})[1]["ETag"]
    assert asset(either_worker, {"If-None-Match": etag})[0] == 304
    assert asset(either_worker, {"If-None-Match": "*"})[0] == 304


def test_the_document_and_the_page_judge_their_conditions(either_worker):
    """`/openapi.json`, `/docs` and its script have an ETag, a digest of their body: a revalidation
    is a 304, and an `If-Match` they do not meet the JSON 412 (RFC 9110 §13.1); they were
    ignored (200)."""
    for path in ("/openapi.json", "/docs", "/docs/init.js"):

        def get(headers: dict[str, str], path: str = path):
            return call(either_worker.connection(), "GET", path, None, headers)

        status, headers, whole = get({})
        assert status == 200, path
        for value in (headers["ETag"], "*"):
            assert get({"If-None-Match": value})[0] == 304
            assert get({"If-Match": value})[2] == whole
        status, headers, body = get({"If-Match": '"not-its-tag"'})
        assert headers["Content-Type"] == "application/json"
        assert_error(status, headers, body, 412)
        assert get({"If-None-Match": '"not-its-tag"'})[2] == whole
