"""What the worker answers and logs for requests that never reach the service.

gunicorn refuses malformed HTTP and over-long request lines or headers itself, with an HTML page
that can quote the request; here they get the service's JSON Error record instead, and so does a
client too slow to send its request (408).
"""

from __future__ import annotations

import json
import socket

from gunicorn import util


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """Stands in for gunicorn.util.write_error in the worker process.

    `mesg` is left out: it can quote the request's bytes, headers included.
    """
    message = f"{reason}: the HTTP server refused the request before the service saw it."
    util.write_nonblock(sock, _json_error(status_int, reason, message))


def _json_error(status_int: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": status_int, "message": message}).encode("ascii")
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def head_too_large_answer(limit: int) -> bytes:
    """The 431 of a request head longer than the worker reads; the connection closes."""
    return _json_error(
        431,
        "Request Header Fields Too Large",
        f"Request Header Fields Too Large: the request line and headers may take {limit} bytes at most.",
    )


def timed_out_answer() -> bytes:
    """The 408 sent to a client that did not send its whole request in time; the connection closes."""
    return _json_error(408, "Request Timeout", "Request Timeout: the request did not arrive in time.")
