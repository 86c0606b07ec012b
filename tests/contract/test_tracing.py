"""Traces with OpenTelemetry: a server span per request with its route template and status, the
store's calls as its children, a trusted proxy's traceparent continued and a client's ignored
(the SDK's in-memory exporter, on memory and Redis); a webhook attempt's span, linked to the
write's, and its traceparent at the receiver; and one OTLP/HTTP export from a real gunicorn
to a receiver on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.extension import plants_state
from app.telemetry import tracing
from app.telemetry.version import VERSION
from tests.helpers import call
from tests.receiver import Receiver
from tests.servers import TOKEN, Gunicorn
from tests.threaded_http import serve_in_thread

AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def traced_client(make_app):
    """Make a traced app on the store under test (closed at the test's end, as make_app's are)."""
    return lambda **settings: _traced(make_app(TESTING=False, PLANTS_API_TOKENS=TOKEN, **settings))


def _traced(app):
    exporter = InMemorySpanExporter()
    state = plants_state(app)
    provider = tracing.start(
        app,
        state.store,
        trusted_proxies=state.settings.trusted_proxies,
        processor=SimpleSpanProcessor(exporter),
    )
    return app.test_client(), exporter, provider


def attribute(span, *names):
    return next(span.attributes[name] for name in names if name in span.attributes)


def test_a_request_is_a_server_span_with_its_store_calls_inside(traced_client, store_settings):
    client, exporter, provider = traced_client(PLANTS_TRUSTED_PROXIES=1)
    try:
        answer = client.post(
            "/plants", json={"id": 7, "name": "Fern"}, headers={**AUTH, "traceparent": PARENT}
        )
        assert answer.status_code == 200
        assert client.get("/plants/7", headers=AUTH).status_code == 200
    finally:
        provider.shutdown()
    spans = exporter.get_finished_spans()
    servers = [span for span in spans if span.kind is SpanKind.SERVER]
    assert [span.name for span in servers] == ["POST /plants", "GET /plants/<plant_id>"]
    create, read = servers
    assert attribute(create, "http.route") == "/plants"
    assert attribute(create, "http.response.status_code", "http.status_code") == 200
    # The trusted proxy's trace goes on; the next request starts its own.
    assert format(create.context.trace_id, "032x") == TRACE_ID
    assert format(read.context.trace_id, "032x") != TRACE_ID
    (stored,) = [span for span in spans if span.name == "plants.store.create"]
    assert stored.parent.span_id == create.context.span_id
    assert stored.attributes["db.system"] == ("memory" if not store_settings else "redis")
    assert create.resource.attributes["service.name"] == "plant-store"
    assert create.resource.attributes["service.version"] == VERSION


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)
def test_a_clients_own_traceparent_is_not_continued_without_a_trusted_proxy(traced_client):
    client, exporter, provider = traced_client()
    try:
        assert client.get("/plants/7", headers={**AUTH, "traceparent": PARENT}).status_code == 404
    finally:
        provider.shutdown()
    (server,) = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]
    assert format(server.context.trace_id, "032x") != TRACE_ID
    assert server.parent is None


class Collector:
    """An OTLP/HTTP receiver: every ExportTraceServiceRequest POSTed to /v1/traces."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.arrived = threading.Event()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    collector.requests.append(ExportTraceServiceRequest.FromString(body))
                    collector.arrived.set()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        serve_in_thread(self.server)

    def spans(self) -> list:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_real_gunicorn_exports_its_spans_over_otlp_http():
    collector = Collector()
    server = Gunicorn(env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"})
    try:
        assert (
            call(
                server.connection(),
                "POST",
                "/plants",
                {"id": 1, "name": "Fern"},
                {**AUTH, "Content-Type": "application/json"},
            )[0]
            == 200
        )
        assert collector.arrived.wait(10)
    finally:
        server.stop()
        collector.stop()
    names = {span.name for span in collector.spans()}
    assert {"POST /plants", "plants.store.create"} <= names
    (resource,) = {
        tuple(
            (kv.key, kv.value.string_value) for kv in rs.resource.attributes if kv.key.startswith("service.")
        )
        for request in collector.requests
        for rs in request.resource_spans
    }
    assert ("service.name", "plant-store") in resource
    assert ("service.version", VERSION) in resource


def test_a_webhook_attempt_is_a_span_linked_to_the_write_and_its_traceparent_reaches_the_receiver(
    traced_client,
):
    receiver = Receiver()
    client, exporter, provider = traced_client(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_TRUSTED_PROXIES=1
    )
    try:
        registered = client.post("/webhooks", json={"url": receiver.url}, headers=AUTH)
        assert registered.status_code == 201
        written = client.post(
            "/plants", json={"id": 7, "name": "Fern"}, headers={**AUTH, "traceparent": PARENT}
        )
        assert written.status_code == 200
        (delivery,) = receiver.wait_for(1)
        deadline = time.monotonic() + 10
        while not any(span.name == "plants.webhook.attempt" for span in exporter.get_finished_spans()):
            assert time.monotonic() < deadline, "no attempt span"
            time.sleep(0.02)
    finally:
        plants_state(client.application).deliverer.stop()
        provider.shutdown()
        receiver.stop()
    spans = exporter.get_finished_spans()
    (write,) = [span for span in spans if span.name == "plants.store.create"]
    (sent,) = [span for span in spans if span.name == "plants.webhook.attempt"]
    assert sent.kind is SpanKind.CLIENT
    assert sent.parent is None  # a trace of its own, linked to the write's
    assert [link.context.span_id for link in sent.links] == [write.context.span_id]
    assert [link.context.trace_id for link in sent.links] == [int(TRACE_ID, 16)]
    assert sent.attributes["http.response.status_code"] == 204
    assert sent.attributes["webhook.id"] == delivery.id
    trace_id, span_id = format(sent.context.trace_id, "032x"), format(sent.context.span_id, "016x")
    flags = f"{int(sent.context.trace_flags):02x}"
    assert delivery.headers["traceparent"] == f"00-{trace_id}-{span_id}-{flags}"
    assert delivery.headers["x-request-id"] == written.headers["X-Request-Id"]


def test_a_watch_ticket_never_reaches_a_span(traced_client):
    client, exporter, provider = traced_client()
    try:
        ticket = client.post("/events/tickets", headers=AUTH).json["ticket"]
        assert client.get(f"/events?after=now&wait=1&ticket={ticket}").status_code == 200
    finally:
        provider.shutdown()
    (server,) = [
        span
        for span in exporter.get_finished_spans()
        if span.kind is SpanKind.SERVER and "ticket=" in str(span.attributes)
    ]
    assert ticket not in str(server.attributes)
    assert ticket[len("plwt_") :] not in str(server.attributes)
    assert "ticket=plwt_[redacted]" in str(server.attributes)


def test_a_token_after_a_quote_in_the_query_never_reaches_a_span(traced_client):
    """A `"` ends a URL in free text, not in the span's target: what follows is still redacted."""
    client, exporter, provider = traced_client()
    try:
        # not the service's parameters: refused, and its span still made
        assert client.get('/plants?a"&token=s3cret-value', headers=AUTH).status_code == 400
    finally:
        provider.shutdown()
    (server,) = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]
    assert "s3cret-value" not in str(server.attributes)
    assert "token=[redacted]" in str(server.attributes)


def test_a_token_sent_as_a_bare_word_never_reaches_a_span(traced_client):
    """A name without a value may be a client's token (`?s3cret`): only the service's own stay."""
    client, exporter, provider = traced_client()
    try:
        assert client.get("/plants?limit=1&s3cret-value&after", headers=AUTH).status_code in (200, 400)
    finally:
        provider.shutdown()
    (server,) = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]
    assert "s3cret-value" not in str(server.attributes)
    assert "limit=1&[redacted]&after" in str(server.attributes)


def test_captured_headers_never_bring_a_token_or_a_ticket_into_a_span(traced_client, monkeypatch):
    """OpenTelemetry's own variable captures request headers into the span (`.*`: all of them):
    the bearer token is a credential whole, and a proxy's header that repeats the request's URL
    holds its ticket. Neither reaches a span; the headers are still seen to be there."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST", ".*")
    monkeypatch.delenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS", raising=False)
    client, exporter, provider = traced_client()
    try:
        ticket = client.post("/events/tickets", headers=AUTH).json["ticket"]
        target = f"/events?after=now&wait=1&ticket={ticket}"
        headers = {"X-Original-URI": target, "Proxy-Authorization": "Basic czNjcmV0"}
        answer = client.get(target, headers=headers)
        assert answer.status_code == 200
    finally:
        provider.shutdown()
    servers = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]
    assert len(servers) == 2
    for server in servers:
        assert TOKEN not in str(server.attributes)
        assert ticket[len("plwt_") :] not in str(server.attributes)
    minted, watched = servers
    assert minted.attributes["http.request.header.authorization"] == ("[redacted]",)
    assert watched.attributes["http.request.header.proxy_authorization"] == ("[redacted]",)
    assert "ticket=plwt_[redacted]" in watched.attributes["http.request.header.x_original_uri"][0]


def test_a_clients_long_headers_and_url_are_cut_short_in_the_span(traced_client, monkeypatch):
    for name in tracing.LENGTH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    client, exporter, provider = traced_client()
    try:
        long_tags = "&".join(f"tags={'t' * 60}{n}" for n in range(60))
        client.get(f"/plants?{long_tags}", headers={**AUTH, "User-Agent": "agent/" + "x" * 6000})
    finally:
        provider.shutdown()
    (server,) = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]
    values = [value for value in server.attributes.values() if isinstance(value, str)]
    assert any(value.startswith("agent/x") for value in values)
    assert max(map(len, values)) == tracing.ATTRIBUTE_LENGTH


def test_a_collector_that_hangs_does_not_hold_the_stop(make_app, monkeypatch):
    hanging = socket.create_server(("127.0.0.1", 0))  # takes the connection, never answers
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{hanging.getsockname()[1]}")
    # The exporter alone would wait an hour for the collector's answer.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3600")
    app = make_app()
    provider = tracing.start(app, plants_state(app).store, trusted_proxies=0)
    try:
        assert app.test_client().get("/plants", headers=AUTH).status_code == 200
        stopping = threading.Thread(
            target=tracing.stop, args=(provider,), kwargs={"timeout": 1.0}, daemon=True
        )
        stopping.start()
        stopping.join(30)  # generous, for a loaded machine: the stop's own bound is 1 s
        assert not stopping.is_alive()
    finally:
        hanging.close()


def test_a_request_that_matches_no_route_is_named_by_its_method_only(traced_client):
    client, exporter, provider = traced_client()
    try:
        assert client.get(f"/plwt_{'z' * 3000}").status_code == 404
        assert client.get("/plants/1", headers=AUTH).status_code == 404
    finally:
        provider.shutdown()
    names = [span.name for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER]
    assert names == ["GET", "GET /plants/<plant_id>"]
