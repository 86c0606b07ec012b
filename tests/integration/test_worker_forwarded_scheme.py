"""`FORWARDED_ALLOW_IPS` (README: the peers gunicorn itself trusts) on the packaged worker: a
trusted peer's `X-Forwarded-Proto` (gunicorn's secure_scheme_headers) sets the request's scheme,
which the access line shows; by default (empty) no peer's does."""

from __future__ import annotations

import time

import pytest

from tests import rawhttp
from tests.servers import Gunicorn


@pytest.fixture(scope="module", params=["127.0.0.1", ""], ids=["trusted", "default"])
def server(request):
    server = Gunicorn(env={"WEB_CONCURRENCY": "1", "FORWARDED_ALLOW_IPS": request.param})
    yield server, bool(request.param)
    server.stop()


def access_line(server: Gunicorn, target: str) -> str:
    deadline = time.monotonic() + 5  # written as the answer goes
    while time.monotonic() < deadline:
        lines = [line for line in server.output().splitlines() if f'"GET {target} HTTP/1.1"' in line]
        if lines:
            return lines[0]
        time.sleep(0.05)
    raise AssertionError(f"no access line for {target}")


@pytest.mark.parametrize("sent", ["https", "http"])
def test_a_trusted_peer_sets_the_scheme_and_another_does_not(server, sent):
    gunicorn, trusted = server
    target = f"/healthz?after=proto-{sent}"  # the service's own parameter: logged as sent
    headers = [("X-Forwarded-Proto", sent)]
    answer = rawhttp.exchange(gunicorn.port, rawhttp.request("GET", target, headers=headers))
    assert answer is not None
    assert answer.status == 200
    scheme = sent if trusted else "http"
    assert f' {scheme} "GET {target} HTTP/1.1"' in access_line(gunicorn, target)
