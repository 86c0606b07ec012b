"""A bound for bench/tail.py: the worker alone, with a WSGI callable that reads the body and
answers a fixed Plant, no Flask."""

from __future__ import annotations

from collections.abc import Callable, Iterable

BODY = b'{"name":"Boston fern","tag":"fern"}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]


def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
    environ["wsgi.input"].read()
    start_response("200 OK", HEADERS)
    return [BODY]
