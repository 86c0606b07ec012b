"""A method the packaged worker's parser (llhttp) does not know, as the README and
docs/operations.md state it: a method the service does not serve is its JSON 405 with `Allow`
wherever the request is read (gunicorn's stock gthread worker, and the packaged worker for every
method llhttp knows: `QUERY`, `PURGE`, WebDAV's); one llhttp does not know (an extension method
such as `BREW`) cannot be read past its request line there, and is the worker's JSON 400, its
connection closed."""

from __future__ import annotations

import pytest

from tests.rawhttp import exchange


def sent(method: str) -> bytes:
    return f"{method} /plants HTTP/1.1\r\nHost: x\r\n\r\n".encode()


@pytest.mark.parametrize("method", ["QUERY", "PURGE", "PROPFIND", "BREW"])
def test_a_method_not_served_is_405_with_allow_under_gthread(gunicorns, method):
    answer = exchange(gunicorns("stock-worker").port, sent(method))
    assert answer is not None
    assert (answer.status, answer.json()["error"]) == (405, 405)
    assert answer.headers["Allow"] == "GET, HEAD, POST, OPTIONS"


@pytest.mark.parametrize("method", ["QUERY", "PURGE", "PROPFIND"])
def test_a_method_llhttp_knows_is_405_with_allow_on_the_packaged_worker(gunicorn, method):
    answer = exchange(gunicorn.port, sent(method))
    assert answer is not None
    assert (answer.status, answer.json()["error"]) == (405, 405)
    assert answer.headers["Allow"] == "GET, HEAD, POST, OPTIONS"


@pytest.mark.parametrize("method", ["BREW", "FOOBAR"])
def test_a_method_llhttp_does_not_know_is_the_packaged_workers_400(gunicorn, method):
    answer = exchange(gunicorn.port, sent(method) + sent("GET"))
    assert answer is not None
    assert answer.status == 400
    assert answer.json() == {
        "error": 400,
        "message": "Bad Request: the request's HTTP framing is malformed (Invalid method encountered).",
    }
    assert answer.headers["Connection"] == "close"
