"""What the worker answers and logs for requests that never reach the service.

gunicorn refuses malformed HTTP and over-long request lines or headers itself, with an HTML page
that can quote the request; here they get the service's JSON Error record instead. A client that
stalls mid-request is logged in one line, not a traceback.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gunicorn import util


def write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    """Stands in for gunicorn.util.write_error in the worker process.

    `mesg` is left out: it can quote the request's bytes, headers included.
    """
    body = json.dumps(
        {
            "error": status_int,
            "message": f"{reason}: the HTTP server refused the request before the service saw it.",
        }
    ).encode("ascii")
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin-1") + body)


class StalledReadFilter(logging.Filter):
    """Turns gthread's traceback for a read timeout into one line: stalled clients can be many."""

    def __init__(self, worker: Any) -> None:
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], TimeoutError):
            record.msg = "Closed a connection whose client sent nothing for %ss mid-request"
            record.args = (self.worker.read_timeout,)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
