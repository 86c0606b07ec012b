"""The worker's resources under attack, each attack short and bounded, on a real gunicorn, while
an honest client opens a new connection for each `GET /healthz` (bench/attacks.py holds the
full-size attacks, and measures them):

- slow readers of the API page's 1.48 MB bundle hold at most a block of it each in the worker (its
  file is read as the client takes it), so its memory stays well under its budget;
- past the budget, connections holding bytes are displaced, the slowest first;
- lingering closes do not count against the connection cap;
- out of descriptors (EMFILE), the worker logs a line now and then and keeps answering;
- `--worker-connections` above the open-file limit is lowered at start, in one line.

No speed is asserted beyond "answered, and not behind the attack": every probe is answered
within the probe's 5 s, and the lingering flood's probes in under a second at the median (a
lingering close lasts 2 s, so a probe queued behind them waits that long).
"""

from __future__ import annotations

import http.client
import resource
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bench.attacks import children, run, workers_rss_mb
from tests.servers import Gunicorn

SECONDS = 3.0
STALLED_BODY = b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n" + b" " * 61440


def _fetch(server: Gunicorn, path: str) -> bytes:
    conn = server.connection()
    conn.request("GET", path)
    response = conn.getresponse()
    assert response.status == 200
    return response.read()


def test_slow_readers_of_the_bundle_hold_little_of_it():
    server = Gunicorn(env={"GUNICORN_READ_TIMEOUT": "5"})
    try:
        assert len(_fetch(server, "/docs/assets/swagger-ui-bundle.js")) > 1_400_000
        before = workers_rss_mb(server.process.pid)
        outcome = run("slow-readers", server.port, server.process.pid, SECONDS, connections=300)
        summary = outcome.summary()
        assert summary["failure_count"] == 0, summary
        assert summary["probes"] >= 5, summary
        # Held per connection, 300 readers would take 444 MB; the budget is 64 MiB.
        assert outcome.rss_mb[1] - before < 48, summary
        assert "Traceback" not in server.output()
    finally:
        server.stop()


def test_past_the_memory_budget_the_slowest_senders_are_displaced():
    # Bodies that stop 4 KiB short: each holds 60 KB in the worker until its deadline. 200 of them
    # would hold 12 MB; the budget is 4 MiB, so most are displaced (closed), and an honest client
    # is answered throughout.
    server = Gunicorn(env={"GUNICORN_READ_TIMEOUT": "10", "GUNICORN_MEMORY_BUDGET": "4"})
    senders = []
    try:
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(STALLED_BODY)
            senders.append(sock)
        for _ in range(5):
            assert _fetch(server, "/healthz")
        # The worker displaces them as it reads their bodies, which a loaded machine puts off.
        # Past their read timeout the rest are answered 408, which is no displacement (`_closed`).
        deadline = time.monotonic() + 30
        while (closed := sum(1 for sock in senders if _closed(sock))) < 100:
            assert time.monotonic() < deadline, closed
            time.sleep(0.1)
        log = server.output()
        assert "Over the memory budget" in log
        assert "Traceback" not in log
    finally:
        for sock in senders:
            sock.close()
        server.stop()


def _closed(sock: socket.socket) -> bool:
    """Closed without an answer (an answer is only peeked at: asked again, it is still there)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_lingering_closes_do_not_fill_the_connection_cap():
    server = Gunicorn(args=("--worker-connections", "50"))
    try:
        outcome = run("lingering", server.port, server.process.pid, SECONDS, per_second=200)
        summary = outcome.summary()
        assert summary["failure_count"] == 0, summary
        assert summary["p50_ms"] < 1000, summary
        assert "Traceback" not in server.output()
    finally:
        server.stop()


def test_out_of_descriptors_the_worker_logs_a_line_now_and_then_and_keeps_answering():
    server = Gunicorn(env={"GUNICORN_READ_TIMEOUT": "5"})
    try:
        (worker,) = children(server.process.pid)
        in_use = len(list(Path(f"/proc/{worker}/fd").iterdir()))
        _, hard = resource.prlimit(worker, resource.RLIMIT_NOFILE)
        resource.prlimit(worker, resource.RLIMIT_NOFILE, (in_use + 60, hard))
        outcome = run("descriptors", server.port, server.process.pid, SECONDS, connections=300)
        summary = outcome.summary()
        assert summary["failure_count"] == 0, summary
        assert summary["probes"] >= 5, summary
        log = server.output()
        failures = [line for line in log.splitlines() if "accept() failed" in line]
        assert 1 <= len(failures) <= 3, failures
        assert "Too many open files" in failures[0]
        assert "Traceback" not in log
    finally:
        server.stop()


def _low_open_file_limit() -> None:
    """A soft and hard limit of 512: no process may raise it."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))


def _low_soft_open_file_limit() -> None:
    """A container runtime's (containerd 2, Docker 29): a low soft limit under a high hard one."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, min(hard, 2048)))


@pytest.mark.parametrize("worker_class", ["packaged", "gthread"])
def test_a_low_soft_open_file_limit_is_raised_for_the_worker_connections(worker_class):
    """Container runtimes start a process at a soft limit of 1024 under a far higher hard one, and
    leave it to the process to raise its own: the worker took 896 of its 1000 connections (and 806
    watches of 900), where nothing stopped it taking them all (gthread's, as many)."""
    env = {"GUNICORN_WORKER_CLASS": "gthread"} if worker_class == "gthread" else {}
    args = ("--worker-connections", "600")
    server = Gunicorn(env, args, preexec_fn=_low_soft_open_file_limit)
    try:
        assert _fetch(server, "/healthz")
        (worker,) = children(server.process.pid)
        soft, hard = resource.prlimit(worker, resource.RLIMIT_NOFILE)
        assert soft == min(2 * 600 + 128, hard)  # its connections, as many closing, and the app's
        assert "--worker-connections" not in server.output()  # not lowered
    finally:
        server.stop()


def test_worker_connections_above_the_open_file_limit_are_lowered_at_start():
    server = Gunicorn(args=("--worker-connections", "2000"), preexec_fn=_low_open_file_limit)
    try:
        assert _fetch(server, "/healthz")
        lines = [line for line in server.output().splitlines() if "--worker-connections 2000" in line]
        assert len(lines) == 1, lines
        assert "open-file limit of 512" in lines[0]
        assert "takes 384 connections" in lines[0]
        assert "ulimit -n" in lines[0]
        assert "LimitNOFILE=" in lines[0]
    finally:
        server.stop()


def test_a_large_answer_is_whole_on_http_1_0_and_1_1():
    server = Gunicorn()
    try:
        bundle = _fetch(server, "/docs/assets/swagger-ui-bundle.js")
        conn = server.connection()
        conn.request("GET", "/docs/assets/swagger-ui-bundle.js", headers={"Range": "bytes=0-99999"})
        ranged = conn.getresponse()  # a range is no file of its own: sent as an iterable
        assert ranged.status == 206
        assert ranged.read() == bundle[:100_000]
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn._http_vsn_str = "HTTP/1.0"  # http.client has no public switch
        conn.request("GET", "/openapi.json")
        response = conn.getresponse()
        assert response.status == 200
        assert response.read() == _fetch(server, "/openapi.json")
    finally:
        server.stop()


def _unsent_and_in_flight(server_port: int, client_port: int) -> int:
    """The server side's Send-Q for one client (`ss`): the bytes the kernel holds for it."""
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{server_port} and dport = :{client_port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[1])


def test_a_slow_reader_leaves_little_of_its_answer_in_the_kernel():
    # A client that reads nothing: the kernel takes a bounded part of the 1.48 MB bundle for it
    # (the rest is sent as it reads), so 1,000 of them do not fill the host's TCP memory.
    server = Gunicorn()
    try:
        bundle = _fetch(server, "/docs/assets/swagger-ui-bundle.js")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(b"GET /docs/assets/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n")
        # What the kernel holds once the worker has sent all it takes: the same two looks apart,
        # however late a loaded machine has the worker answer.
        deadline, before = time.monotonic() + 30, -1
        while (held := _unsent_and_in_flight(server.port, sock.getsockname()[1])) != before or not held:
            assert time.monotonic() < deadline, held
            before = held
            time.sleep(0.2)
        assert held < len(bundle) // 2, held
        received = b""
        while not received.endswith(bundle[-1000:]):
            chunk = sock.recv(65536)
            assert chunk
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert f"\r\nContent-Length: {len(bundle)}\r\n".encode() in head
        assert body == bundle
        sock.close()
    finally:
        server.stop()
