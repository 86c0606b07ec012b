"""The answers the worker gives itself, as the service's JSON Error record, each closing the
connection: malformed or over-limit requests, a client too slow to send one, and an app error
the app did not answer."""

from __future__ import annotations

import json

from app.server.worker.reader import Refusal


def encode(refusal: Refusal) -> bytes:
    """The refusal's bytes. Its message never quotes the request: it can hold a token."""
    body = json.dumps({"error": refusal.status, "message": refusal.message}).encode("ascii")
    retry = "" if refusal.retry_after is None else f"Retry-After: {refusal.retry_after}\r\n"
    head = (
        f"HTTP/1.1 {refusal.status} {refusal.reason}\r\nConnection: close\r\n{retry}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def watches_full(limit: int) -> Refusal:
    """A watch past the worker's share of its connections (loop.py's `watch_limit`)."""
    message = (
        f"Service Unavailable: this server holds as many watches of the feed as it may ({limit});"
        " retry shortly, or poll."
    )
    return Refusal(503, "Service Unavailable", message, retry_after=5)


TIMED_OUT = Refusal(408, "Request Timeout", "Request Timeout: the request did not arrive in time.")
APP_ERROR = Refusal(
    500, "Internal Server Error", "Internal Server Error: the service failed to answer; the error is logged."
)
