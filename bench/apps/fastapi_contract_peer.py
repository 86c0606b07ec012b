"""The contract peer: the service's create contract (`POST /plants` on the memory store) as a
competent engineer writes it in idiomatic FastAPI + pydantic v2 under uvicorn, to measure the
service against (issue 55). Beside it, bench/apps/fastapi_peer.py is the bare peer.

What it does, and why each piece is here (each is a cost the service's create pays too):

- bearer: every configured token (PLANTS_API_TOKENS) compared in constant time, as app/auth;
  401 with `WWW-Authenticate` and the Error record `{error, message}` otherwise.
- strict body: pydantic v2, strict types, int64 id, the name and tag lengths of
  app/schemas/records.py, extra fields refused: 400 with an Error record (bad JSON too).
- create: 200 with the Plant `{name, tag?}`, `Content-Type: application/json` and the plant's
  strong ETag (the first 16 hex digits of the SHA-1 of `<name length>:<name><tag>`, the
  service's own, app/store/base.py); an identical replay 200 with the same answer; a
  conflicting one 409 with an Error record.
- store: the id dict, and the indexes the memory store keeps for its pages (app/store/memory):
  every id in order and each tag's ids in order (sortedcontainers' SortedList, as there).
- change feed: a bounded ring of `created` events with sequence numbers, as the memory store
  keeps them (`collections.deque(maxlen=PLANTS_EVENTS_RETAIN)`, 100,000 by default).
- metrics (prometheus_client, as app/metrics.py counts a create): `plants_http_requests_total
  {route, method, status}` and `plants_http_request_duration_seconds{route}` for every request,
  refusals included, in a pure ASGI middleware (Starlette's advice over BaseHTTPMiddleware), and
  `plants_events_appended_total{type}` per change; served at `GET /metrics` behind the bearer.
- access line: uvicorn's own, as uvicorn ships (`--log-level info`): one line per request on
  stdout, where the service's gunicorn writes its own (bench/harness/servers.py `peer()`).

Left out, so the service does more per create than this peer: the `X-Request-Id` header and the
event's origin, the store's capacity (507) and its lock (one event-loop thread needs none), the
webhooks and watchers the feed serves, rate limits and JWTs (all off in the benchmark).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import time
from collections import deque
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from sortedcontainers import SortedList
from starlette.exceptions import HTTPException

# The same body and answer models as the bare peer's: one definition of the strict NewPlant.
from bench.apps.fastapi_peer import NewPlant, Plant

TOKENS = [t.strip().encode() for t in os.environ["PLANTS_API_TOKENS"].split(",") if t.strip()]
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)  # app/metrics.py's
registry = CollectorRegistry()
REQUESTS = Counter("plants_http_requests", "Requests answered.", ["route", "method", "status"],
                   registry=registry)  # fmt: skip
DURATION = Histogram("plants_http_request_duration_seconds", "Time to the response.", ["route"],
                     buckets=BUCKETS, registry=registry)  # fmt: skip
EVENTS = Counter("plants_events_appended", "Changes written to the change feed.", ["type"], registry=registry)


plants: dict[int, tuple[str, str | None]] = {}
ids: SortedList = SortedList()
ids_by_tag: dict[str, SortedList] = {}
feed: deque[tuple[int, str, int, str, str | None, int]] = deque(
    maxlen=int(os.environ.get("PLANTS_EVENTS_RETAIN", "100000"))
)
sequence = itertools.count(1)


def etag(name: str, tag: str | None) -> str:
    encoded = name.encode()
    value = b"%d:%s%s" % (len(encoded), encoded, tag.encode() if tag else b"")
    return f'"{hashlib.sha1(value, usedforsecurity=False).hexdigest()[:16]}"'


async def bearer(request: Request) -> None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(401, "This operation needs an 'Authorization: Bearer <token>' header.",
                            {"WWW-Authenticate": 'Bearer realm="plants"'})  # fmt: skip
    matched = False
    for candidate in TOKENS:
        matched |= hmac.compare_digest(candidate, token.encode())
    if not matched:
        raise HTTPException(401, "The bearer token is not accepted.",
                            {"WWW-Authenticate": 'Bearer realm="plants", error="invalid_token"'})  # fmt: skip


class Metrics:
    """Counts every answer by its route template (bounded labels) and times it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unrouted")
            REQUESTS.labels(route, scope["method"], str(status)).inc()
            DURATION.labels(route).observe(time.perf_counter() - started)


app = FastAPI()
app.add_middleware(Metrics)


@app.exception_handler(HTTPException)
async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": exc.status_code, "message": exc.detail}, exc.status_code, exc.headers)


@app.exception_handler(RequestValidationError)
async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(error["type"] == "json_invalid" for error in errors):
        return JSONResponse({"error": 400, "message": "The request body is not valid JSON."}, 400)
    fields = ", ".join(sorted({str(error["loc"][-1]) for error in errors}))
    message = f"The request body is not a valid NewPlant. Invalid fields: {fields}."
    return JSONResponse({"error": 400, "message": message}, 400)


@app.post("/plants", response_model=Plant, response_model_exclude_none=True, dependencies=[Depends(bearer)])
async def create_plant(new: NewPlant, response: Response) -> Plant:
    record = (new.name, new.tag)
    stored = plants.get(new.id)
    if stored is None:  # one event-loop thread: nothing runs between the look-up and the insert
        plants[new.id] = record
        ids.add(new.id)
        if new.tag is not None:
            tagged = ids_by_tag.get(new.tag)
            if tagged is None:
                tagged = ids_by_tag[new.tag] = SortedList()
            tagged.add(new.id)
        feed.append((next(sequence), "plant.created", new.id, new.name, new.tag, time.time_ns() // 1_000_000))
        EVENTS.labels("plant.created").inc()
    elif stored != record:
        raise HTTPException(409, f"A plant with id {new.id} already exists with a different name or tag.")
    response.headers["ETag"] = etag(new.name, new.tag)
    return Plant(name=new.name, tag=new.tag)


@app.get("/metrics", dependencies=[Depends(bearer)])
async def metrics() -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
