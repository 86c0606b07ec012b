"""A request still arriving when the packaged worker stops (SIGTERM's drain, a reload) has the
stop's 2 s to arrive whole, as a kept-alive connection does, then is answered 408 and closed: its
client sends it again (nothing of it was processed). The worker's line says that the stop cut it,
not that the client took longer than the read timeout, which it did not."""

from __future__ import annotations

import signal
import socket
import time

from tests import rawhttp
from tests.servers import TOKEN, Gunicorn


def test_a_request_cut_by_the_stop_is_408_and_its_line_names_the_stop():
    server = Gunicorn(env={"WEB_CONCURRENCY": "1", "GUNICORN_READ_TIMEOUT": "30"})
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            head = (
                f"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
            )
            sock.sendall(head.encode() + b'{"id": 1')
            time.sleep(0.5)  # the worker has read the head: the request is on its way
            server.process.send_signal(signal.SIGTERM)
            answers = rawhttp.responses(sock, 1)
        assert [answer.status for answer in answers] == [408]
        assert answers[0].json()["error"] == 408
        server.process.wait(30)
    finally:
        server.stop()
    lines = [line for line in server.output().splitlines() if "Answered 408" in line]
    assert len(lines) == 1, server.output()[-3000:]
    assert "stopped" in lines[0]
    assert "within 30" not in lines[0]
