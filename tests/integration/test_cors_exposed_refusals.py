"""A page on a listed origin reads what a refused PATCH tells it to send instead: a merge patch in
another type is 415 with `Accept-Patch` (RFC 5789 §2.2), which is no CORS-safelisted response
header, so Chromium hid it unless exposed: the page read `null` where every other client reads the
patch type to send, on the packaged worker and gunicorn's gthread alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chromium import start_chromium
from tests.helpers import call, static_origin
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def page_origin(tmp_path_factory):
    directory: Path = tmp_path_factory.mktemp("page")
    (directory / "index.html").write_text("<!doctype html><title>page</title>")
    with static_origin(directory) as origin:
        yield origin


@pytest.fixture(scope="module", params=["packaged", "gthread"])
def service(request, page_origin):
    args = ("--worker-class", "gthread") if request.param == "gthread" else ()
    server = Gunicorn(env={"PLANTS_CORS_ORIGINS": page_origin}, args=args)
    yield server
    server.stop()


def exposed(headers) -> set[str]:
    return {name.strip().lower() for name in headers.get("Access-Control-Expose-Headers", "").split(",")}


def put_plant(service: Gunicorn, plant_id: int) -> None:
    status, _, body = call(service.connection(), "PUT", f"/plants/{plant_id}", {"name": "Fern"}, {
        **AUTH, "Content-Type": "application/json"})  # fmt: skip
    assert status in (200, 201), body


def test_a_patch_refused_for_its_type_exposes_accept_patch(service, page_origin):
    put_plant(service, 4101)
    status, headers, body = call(service.connection(), "PATCH", "/plants/4101", b'{"tag": "x"}', {
        **AUTH, "Content-Type": "text/plain", "Origin": page_origin})  # fmt: skip
    assert status == 415, body
    assert json.loads(body)["error"] == 415
    assert headers["Access-Control-Allow-Origin"] == page_origin
    assert headers["Accept-Patch"] == "application/merge-patch+json"
    assert "accept-patch" in exposed(headers)


PAGE_SCRIPT = """
const [api, token, done] = arguments;
(async () => {
  const refused = await fetch(`${api}/plants/4102`, {method: "PATCH", body: '{"tag": "x"}',
    headers: {Authorization: `Bearer ${token}`, "Content-Type": "text/plain"}});
  done({status: refused.status, acceptPatch: refused.headers.get("Accept-Patch")});
})().catch((error) => done({error: String(error)}));
"""


def test_a_page_reads_accept_patch(service, page_origin, monkeypatch):
    put_plant(service, 4102)
    browser = start_chromium(monkeypatch)
    try:
        browser.set_script_timeout(20)
        browser.get(f"{page_origin}/index.html")
        seen = browser.execute_async_script(PAGE_SCRIPT, f"http://127.0.0.1:{service.port}", TOKEN)
    finally:
        browser.quit()
    assert seen == {
        "status": 415,
        "acceptPatch": "application/merge-patch+json",
    }
