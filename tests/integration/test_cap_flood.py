"""A flood of connections that send nothing, at a small connection cap, against a real gunicorn:
an honest client whose request has arrived, not yet read, is never the one displaced (closed with
its bytes unread, the kernel resets it), as a connection that has sent nothing is.

Deterministic: the worker is stopped (SIGSTOP) while each honest client connects and sends, then
the flood connects behind it, so on waking the worker accepts them all in one batch, before its
one request thread could read the honest ones.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

from tests.servers import Gunicorn

CAP = 8
HONEST = 4  # fewer than the cap: a newcomer always finds one that sent nothing to displace
FLOOD = 12  # after each honest client: with it, fewer than one accept batch (64) in all
PROBE = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "T"


def answer_or_reset(sock: socket.socket) -> bytes | str:
    try:
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        return answer


def test_at_the_cap_a_flood_that_sends_nothing_displaces_no_honest_client():
    server = Gunicorn(args=("--worker-connections", str(CAP)), env={"GUNICORN_THREADS": "1"})
    honest: list[socket.socket] = []
    flood: list[socket.socket] = []
    try:
        time.sleep(0.3)  # the start-up probe's connection has closed
        master = server.process.pid
        (worker,) = map(int, Path(f"/proc/{master}/task/{master}/children").read_text().split())
        os.kill(worker, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 5
            while not stopped(worker):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            for _ in range(HONEST):
                sock = connect(server.port)
                sock.sendall(PROBE)  # in the kernel's buffer before the flood behind it connects
                honest.append(sock)
                flood += [connect(server.port) for _ in range(FLOOD)]
        finally:
            os.kill(worker, signal.SIGCONT)
        answers = [answer_or_reset(sock) for sock in honest]
        assert "reset" not in answers, answers
        assert all(isinstance(a, bytes) and a.startswith(b"HTTP/1.1 200 ") for a in answers), answers
        # The flood's displaced connections were closed (FIN): they had nothing unread to reset.
        for sock in flood:
            sock.settimeout(0.001)  # one still held has nothing to read
            assert answer_or_reset(sock) != "reset"
    finally:
        for sock in honest + flood:
            sock.close()
        server.stop()
