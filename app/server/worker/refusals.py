"""The answers the worker gives itself, as the service's JSON Error record, each closing the
connection: malformed or over-limit requests, a client too slow to send one, and an app error
the app did not answer."""

from __future__ import annotations

import json

from app.server.worker.reader import Refusal


def encode(refusal: Refusal) -> bytes:
    """The refusal's bytes. Its message never quotes the request: it can hold a token."""
    body = json.dumps({"error": refusal.status, "message": refusal.message}).encode("ascii")
    head = (
        f"HTTP/1.1 {refusal.status} {refusal.reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


TIMED_OUT = Refusal(408, "Request Timeout", "Request Timeout: the request did not arrive in time.")
APP_ERROR = Refusal(
    500, "Internal Server Error", "Internal Server Error: the service failed to answer; the error is logged."
)
