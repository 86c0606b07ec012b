"""Slow and hostile clients against one worker, with a probe timing an honest client's answers.

    .venv/bin/python bench/slow_clients.py                 # memory store, 30 s
    .venv/bin/python bench/slow_clients.py --store redis   # one Redis (2 request threads)

The attack, held for the whole run (issue 31's goal), all from one thread on a selector:
- 50 connections dribbling a request's head, one byte at a time;
- 20 dribbling a body (`Content-Length: 1000`), half with a valid token and half with a bad one;
- 10 pipelining 20 requests for the API page's Swagger bundle and never reading;
- 1,000 idle connections.
A connection the service closes is opened again. The probe sends `GET /healthz` and
`POST /plants`, each on a new connection, every 0.25 s. The goal: every probe answered within
100 ms at p99, none over 1 s. tests/integration/test_slow_clients.py runs the same, shorter.
"""

from __future__ import annotations

import argparse
import http.client
import json
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOKEN = "bench-token"
SWAGGER = "/docs/swagger-ui-bundle.js"


@dataclass
class Attacker:
    kind: str
    head: bytes  # sent at once on connecting
    dribble: bytes  # then one byte of this every `interval`
    interval: float
    sock: socket.socket | None = None
    sent: int = 0
    next_at: float = 0.0


@dataclass
class Result:
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    reconnects: int = 0
    idle_open: int = 0

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")

    def summary(self) -> dict:
        return {
            "probes": len(self.latencies_ms),
            "failures": self.failures[:5],
            "failure_count": len(self.failures),
            "p50_ms": round(self.percentile(0.50), 2),
            "p99_ms": round(self.percentile(0.99), 2),
            "max_ms": round(max(self.latencies_ms, default=float("nan")), 2),
            "reconnects": self.reconnects,
            "idle_open_at_end": self.idle_open,
        }


def attackers(token: str, header_dribblers: int, body_dribblers: int, pipeliners: int) -> list[Attacker]:
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: " + b"x" * 4000 + b"\r\n\r\n"
    out = [Attacker("head", b"", head, 1.0) for _ in range(header_dribblers)]
    for number in range(body_dribblers):
        bearer = token if number % 2 else "not-a-token"
        body_head = (
            f"POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {bearer}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        ).encode()
        out.append(Attacker("body", body_head, b"{" + b" " * 999, 1.0))
    pipelined = f"GET {SWAGGER} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode() * 20
    out += [Attacker("pipeline", pipelined, b"", 3600.0) for _ in range(pipeliners)]
    return out


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing
    sock.setblocking(False)
    return sock


def _attack(port: int, crowd: list[Attacker], idle: int, stop: threading.Event, result: Result) -> None:
    selector = selectors.DefaultSelector()
    idle_socks: list[socket.socket] = []
    for _ in range(idle):
        try:
            sock = _connect(port)
        except OSError:
            break
        idle_socks.append(sock)
        selector.register(sock, selectors.EVENT_READ, None)

    def open_one(attacker: Attacker) -> None:
        attacker.sock = _connect(port)
        attacker.sent = 0
        attacker.next_at = time.monotonic() + attacker.interval
        if attacker.head:
            attacker.sock.sendall(attacker.head)
        selector.register(attacker.sock, selectors.EVENT_READ, attacker)

    def reopen(attacker: Attacker) -> None:
        selector.unregister(attacker.sock)
        attacker.sock.close()
        result.reconnects += 1
        open_one(attacker)

    for attacker in crowd:
        open_one(attacker)
    while not stop.is_set():
        for key, _ in selector.select(timeout=0.05):
            attacker = key.data
            if attacker is None:  # an idle connection closed by the service: it stays closed
                try:
                    if key.fileobj.recv(4096):
                        continue
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                selector.unregister(key.fileobj)
                idle_socks.remove(key.fileobj)
                key.fileobj.close()
            elif attacker.kind != "pipeline":
                try:
                    data = attacker.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    reopen(attacker)
            else:  # a pipeliner never reads, but notices when the service closed it
                try:
                    closed = attacker.sock.recv(1, socket.MSG_PEEK) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    reopen(attacker)
        now = time.monotonic()
        for attacker in crowd:
            if attacker.dribble and now >= attacker.next_at and attacker.sent < len(attacker.dribble):
                try:
                    attacker.sock.send(attacker.dribble[attacker.sent : attacker.sent + 1])
                    attacker.sent += 1
                except OSError:
                    reopen(attacker)
                attacker.next_at = now + attacker.interval
    result.idle_open = len(idle_socks)
    for key in list(selector.get_map().values()):
        key.fileobj.close()
    selector.close()


def _probe_once(port: int, token: str, plant_id: int) -> list[tuple[str, float, int]]:
    timings = []
    for method, path, body in (
        ("GET", "/healthz", None),
        ("POST", "/plants", {"id": plant_id, "name": "probe"}),
    ):
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        try:
            conn.request(method, path, body=json.dumps(body) if body else None, headers=headers)
            response = conn.getresponse()
            response.read()
            status = response.status
        except OSError as exc:
            status = -1
            timings.append((f"{method} {path}: {type(exc).__name__}", time.monotonic() - started, status))
            continue
        finally:
            conn.close()
        timings.append((f"{method} {path}", time.monotonic() - started, status))
    return timings


def hold(
    port: int,
    seconds: float,
    token: str = TOKEN,
    idle: int = 1000,
    header_dribblers: int = 50,
    body_dribblers: int = 20,
    pipeliners: int = 10,
    settle: float = 2.0,
) -> Result:
    """Attack the service on `port` for `seconds` while probing it; the probes' timings."""
    result = Result()
    stop = threading.Event()
    crowd = attackers(token, header_dribblers, body_dribblers, pipeliners)
    attack = threading.Thread(target=_attack, args=(port, crowd, idle, stop, result), daemon=True)
    attack.start()
    time.sleep(settle)  # every attacker connected and started
    ends = time.monotonic() + seconds
    plant_id = 0
    while time.monotonic() < ends:
        plant_id += 1
        for label, elapsed, status in _probe_once(port, token, plant_id):
            result.latencies_ms.append(elapsed * 1000)
            if status != 200:
                result.failures.append(f"{label}: {status}")
        time.sleep(0.25)
    stop.set()
    attack.join(timeout=10)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import tempfile

    from tests.servers import Gunicorn, RedisServer

    env = {"PLANTS_API_TOKENS": TOKEN}
    redis = None
    if args.store == "redis":
        redis = RedisServer(Path(tempfile.mkdtemp(prefix="slow-clients-")))
        env["PLANTS_STORE_URL"] = redis.unix_url
    server = Gunicorn(env=env, args=("--worker-connections", "1000"))
    try:
        result = hold(server.port, args.seconds)
    finally:
        server.stop()
        if redis is not None:
            redis.stop()
    summary = {"store": args.store, "seconds": args.seconds, **result.summary()}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
