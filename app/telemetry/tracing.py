"""Traces with OpenTelemetry, when asked for: `pip install '.[otel]'`, then set
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_TRACES_EXPORTER).

Each gunicorn worker starts its own tracing after the fork (gunicorn_conf.py's post_worker_init):
the batch exporter's thread must be the worker's. Spans: one server span per request (the Flask
instrumentation: its route template, method and status), continuing a W3C `traceparent` only from
a trusted proxy (PLANTS_TRUSTED_PROXIES); and one span per store call (`plants.store.<operation>`),
the service's own, because the Redis store talks to Redis on held connections, past redis-py's
instrumented methods. A write's span context is stored with its event, so that each webhook
attempt's span (app/webhooks/) links to it. Off, none of this is imported: a request pays nothing.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from app.telemetry.redact import REDACTED, holds_secret, query_holds_secret, scrub, scrub_query, scrub_uri
from app.telemetry.version import VERSION

#: What asks for traces (the SDK's own variables).
TRIGGERS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")
#: The store's operations that get a span.
STORE_OPERATIONS = ("create", "get", "delete", "change", "page", "events")
#: Those that write an event: their span's context goes with it (the `origin` of base.py).
STORE_WRITES = ("create", "delete", "change")
#: What the `otel` extra installs.
EXTRA_MODULES = (
    "opentelemetry.sdk.trace",
    "opentelemetry.instrumentation.flask",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
#: plant-store is not on PyPI: the extra installs from a clone (or from a built wheel's path).
#: The longest span attribute value unless the SDK's variables set one: a client's User-Agent,
#: Host or URL (up to the worker's 8 KB header limits) would otherwise go whole into every span.
ATTRIBUTE_LENGTH = 512
#: What bounds the SDK's own limit (its default is none).
LENGTH_VARIABLES = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
#: How long a stopping worker waits for its last spans to be exported: the SDK's shutdown would
#: wait 30 s on a collector that hangs (10 s a batch), as long as the whole graceful timeout.
STOP_EXPORT_S = 2.0
MISSING_EXTRA = (
    "tracing is asked for ({}) but OpenTelemetry is not installed: from the clone, run"
    " pip install -r requirements.txt -e '.[otel]'"
)


def requested(environ: Mapping[str, str] = os.environ) -> str | None:
    """The variable that asks for traces, or None (OTEL_TRACES_EXPORTER=none asks for none)."""
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    return next((name for name in TRIGGERS if environ.get(name, "").strip()), None)


def available() -> bool:
    """Whether the `otel` extra is installed."""
    try:
        return all(importlib.util.find_spec(name) for name in EXTRA_MODULES)
    except ImportError:  # a parent package missing
        return False


def start(app: Any, store: Any, *, trusted_proxies: int, processor: Any = None) -> Any:
    """Trace `app` and its `store`: the TracerProvider, to shut down when the process stops.
    `processor` replaces the OTLP batch exporter (the tests' in-memory one)."""
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

    attributes = {"service.version": VERSION}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "plant-store"
    length = None if any(os.environ.get(name) for name in LENGTH_VARIABLES) else ATTRIBUTE_LENGTH
    provider = TracerProvider(
        resource=Resource.create(attributes), span_limits=SpanLimits(max_span_attribute_length=length)
    )
    provider.add_span_processor(processor or _exporting_processor())
    FlaskInstrumentor.instrument_app(app, tracer_provider=provider, response_hook=_finish_server_span)
    state = app.extensions.get("plants")
    if state is not None:
        # This worker's webhook attempts get spans of their own.
        state.deliverer.tracer = provider.get_tracer("app.webhooks", VERSION)
    if not trusted_proxies:
        app.wsgi_app = _without_trace_context(app.wsgi_app)
    _trace_store(store, provider.get_tracer("app.store", VERSION))
    return provider


def stop(provider: Any, timeout: float = STOP_EXPORT_S) -> None:
    """Export the spans `provider` still holds, for `timeout` seconds at most: what a collector
    that is down or hangs has not taken by then is lost, and the process stops on time."""
    stopping = threading.Thread(target=provider.shutdown, name="plants-tracing-stop", daemon=True)
    stopping.start()
    stopping.join(timeout)


#: The server span's attributes that hold a request's whole target or URL (old and new conventions).
_TARGETS = frozenset({"http.target", "http.url", "url.full"})
#: The request headers that are a credential whole, as the instrumentation names them once
#: OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST captures them (`.*` captures every
#: one): their values never reach a span, whatever its sanitize variable says (unset, it redacts none).
_CREDENTIAL_HEADERS = frozenset(
    f"http.request.header.{name}" for name in ("authorization", "proxy_authorization", "cookie")
)


def _finish_server_span(span: Any, status: str, headers: Any) -> None:
    """A watch ticket in the query (`/events?ticket=...`, app/auth/watch_tickets.py), and any value
    or bare name the logs redact (app/telemetry/redact.py), leaves the server span's URL attributes
    (`http.target`, `url.query`, ...): the instrumentation's response hook runs once it has set
    them all, before the span ends; so do a captured header's (`_scrub_lines`). A request that
    matched no route keeps
    only its method as its name (as OpenTelemetry's HTTP conventions name it): the
    instrumentation names it by the client's whole path, of any length, a ticket's included."""
    if span is None or not span.is_recording():
        return
    attributes = dict(span.attributes or {})
    for name, value in attributes.items():
        if not isinstance(value, str):
            if isinstance(value, tuple):  # a captured header's lines
                _scrub_lines(span, name, value)
            continue
        if name == "url.query":  # a query without its `?`: the parameters the logs redact
            if query_holds_secret(value):
                span.set_attribute(name, scrub_query(value))
        elif name in _TARGETS:  # a whole target, its query whatever characters it holds
            if (scrubbed := scrub_uri(value)) != value:
                span.set_attribute(name, scrubbed)
        elif holds_secret(value):
            span.set_attribute(name, scrub(value))
    if "http.route" not in attributes:
        method = attributes.get("http.request.method", attributes.get("http.method"))
        span.update_name(method if isinstance(method, str) and method.isalpha() else "HTTP")


def _scrub_lines(span: Any, name: str, lines: tuple[Any, ...]) -> None:
    """A captured header's lines: a credential's redacted whole, any other's as the logs scrub them
    (a proxy's header that repeats the request's URL holds its ticket)."""
    if name in _CREDENTIAL_HEADERS:
        span.set_attribute(name, [REDACTED] * len(lines))
    elif any(isinstance(line, str) and holds_secret(line) for line in lines):
        span.set_attribute(name, [scrub(line) if isinstance(line, str) else line for line in lines])


def _exporting_processor() -> Any:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        return BatchSpanProcessor(ConsoleSpanExporter())
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return BatchSpanProcessor(OTLPSpanExporter())


def _without_trace_context(wsgi_app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """A client's own `traceparent` starts no trace of ours: only a trusted proxy's is continued."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ.pop("HTTP_TRACEPARENT", None)
        environ.pop("HTTP_TRACESTATE", None)
        environ.pop("HTTP_BAGGAGE", None)
        return wsgi_app(environ, start_response)

    return app


def _trace_store(store: Any, tracer: Any) -> None:
    """Each store operation in a span of its own, under the request's."""
    from opentelemetry.trace import SpanKind

    system = "redis" if store.shared else "memory"
    kind = SpanKind.CLIENT if store.shared else SpanKind.INTERNAL
    for name in STORE_OPERATIONS:
        method = getattr(store, name, None)
        if method is not None:
            wrap = _traced_write if name in STORE_WRITES else _traced
            setattr(store, name, wrap(method, f"plants.store.{name}", tracer, kind, system))


def _traced(
    method: Callable[..., Any], span_name: str, tracer: Any, kind: Any, system: str
) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span(span_name, kind=kind, attributes={"db.system": system}):
            return method(*args, **kwargs)

    return call


def _traced_write(
    method: Callable[..., Any], span_name: str, tracer: Any, kind: Any, system: str
) -> Callable[..., Any]:
    """As `_traced`, and the span's `traceparent` appended to the write's origin."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()

    def call(*args: Any, origin: str = "", **kwargs: Any) -> Any:
        with tracer.start_as_current_span(span_name, kind=kind, attributes={"db.system": system}):
            carrier: dict[str, str] = {}
            propagator.inject(carrier)
            parent = carrier.get("traceparent")
            return method(*args, origin=f"{origin} {parent}" if parent else origin, **kwargs)

    return call


def traced_attempt(
    tracer: Any, write_traceparent: str | None, attributes: dict[str, Any], attempt: Callable[..., Any]
) -> Any:
    """One webhook attempt, `attempt(headers)`, in a span of its own (`plants.webhook.attempt`):
    the root of a trace of its own, since no request is in progress, with a link to the span of
    the write that made the event (its stored `traceparent`). `headers` carry the attempt's own
    `traceparent` to the receiver. The outcome's status and error go on the span."""
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    links = []
    if write_traceparent:
        written = trace.get_current_span(propagator.extract({"traceparent": write_traceparent}))
        if written.get_span_context().is_valid:
            links.append(Link(written.get_span_context()))
    with tracer.start_as_current_span(
        "plants.webhook.attempt", context=Context(), kind=SpanKind.CLIENT, links=links, attributes=attributes
    ) as span:
        headers: dict[str, str] = {}
        propagator.inject(headers)
        outcome = attempt(headers)
        if outcome.status is not None:
            span.set_attribute("http.response.status_code", outcome.status)
        if not outcome.delivered:
            span.set_attribute("error.type", outcome.error or str(outcome.status))
            span.set_status(StatusCode.ERROR)
        return outcome
