"""The HTTP-framing attacks on the worker, each held while an honest client probes `/healthz`.

    python -m bench attacks                          # every attack, memory store, 10 s each
    python -m bench attacks --store redis --workers 2 --attack chunk-extensions
    python -m bench attacks --smoke                  # 2 s each

- `half-open`: connections that send part of a request and close: 1,000 a second (`POST
  /healthz`, `Content-Length: 100`, 3 body bytes), and one that sends only a request line;
- `dribble`: 1,000 connections each dribbling a body at 1 byte a second (the worker's cap);
- `chunk-extensions`: 40 connections each sending `1;e=<100 a>\\r\\nx\\r\\n` 5,000 times, no last chunk;
- `pipeline`: one client pipelining 2,500 `HEAD /plants` with a wrong token, reading promptly.

First, the workers' CPU while 1,000 idle connections are held. Then the probe opens a new
connection for each `GET /healthz`, every 50 ms. After each attack ends, the workers' CPU is
measured over the next second: the goal is idle.
tests/integration/test_attacks.py runs each attack, shorter.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.harness import TOKEN
from bench.harness.load import Probes, attack, attackers
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import RedisServer, children_cpu_seconds, gunicorn, scratch

HALF_OPEN = b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"
REQUEST_LINE_ONLY = b"GET /healthz HTTP/1.1\r\n"
CHUNK_HEAD = b"POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
CHUNKS = (b"1;e=" + b"a" * 100 + b"\r\nx\r\n") * 5000
PIPELINED = b"HEAD /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n" * 2500


@dataclass
class Outcome:
    attack: str
    probe: Probes
    idle_cpu_share: float  # of one core, the workers' CPU in the second after the attack ended
    rounds: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "attack": self.attack,
            **self.probe.summary(),
            "idle_cpu_share": round(self.idle_cpu_share, 3),
            "rounds": self.rounds,
        }


def half_open(port: int, stop: threading.Event, connections: int = 1000) -> int:
    rounds = 0
    while not stop.is_set():
        started = time.monotonic()
        socks = []
        for part in [HALF_OPEN] * connections + [REQUEST_LINE_ONLY]:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.sendall(part)
                socks.append(sock)
            except OSError:
                break  # the listener's queue is full: close what is open, then go again
        for sock in socks:
            sock.close()
        rounds += 1
        # A round a second: back to back, the rounds outrun what any one process accepts, and the
        # kernel then drops SYNs at the full listen queue (the honest client's too: a 1 s resend).
        stop.wait(max(0.0, started + 1.0 - time.monotonic()))
    return rounds


def dribble(port: int, stop: threading.Event, connections: int = 1000) -> int:
    attack(port, attackers(TOKEN, 0, connections, 0), 0, stop, Probes())
    return 1


def chunk_extensions(port: int, stop: threading.Event, connections: int = 40) -> int:
    rounds = 0

    def one() -> None:
        nonlocal rounds
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(CHUNK_HEAD + CHUNKS)
                    sock.settimeout(1)
                    while not stop.is_set() and sock.recv(65536):
                        pass
            except OSError:
                pass
            rounds += 1

    threads = [threading.Thread(target=one, daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rounds


def pipeline(port: int, stop: threading.Event) -> int:
    rounds = 0
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                reader = threading.Thread(target=_read_answers, args=(sock, PIPELINED.count(b"HEAD")))
                reader.start()
                sock.sendall(PIPELINED)
                reader.join()
        except OSError:
            pass
        rounds += 1
    return rounds


def _read_answers(sock: socket.socket, count: int) -> None:
    seen = 0
    try:
        while seen < count:
            data = sock.recv(65536)
            if not data:
                return
            seen += data.count(b"HTTP/1.1 ")
    except OSError:
        return


ATTACKS: dict[str, Callable[..., int]] = {
    "half-open": half_open,
    "dribble": dribble,
    "chunk-extensions": chunk_extensions,
    "pipeline": pipeline,
}


def probe(port: int, result: Probes) -> None:
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while data := sock.recv(65536):
                answer += data
        if not answer.startswith(b"HTTP/1.1 200 "):
            result.failures.append(repr(answer[:40]))
    except OSError as exc:
        result.failures.append(type(exc).__name__)
    result.latencies_ms.append((time.monotonic() - started) * 1000)


def run(name: str, port: int, master_pid: int, seconds: float, **options: int) -> Outcome:
    """Hold attack `name` for `seconds` while probing; then the workers' CPU in the next second."""
    stop = threading.Event()
    rounds: list[int] = []
    attacking = threading.Thread(
        target=lambda: rounds.append(ATTACKS[name](port, stop, **options)), daemon=True
    )
    attacking.start()
    time.sleep(1.0)  # the attack under way
    result = Probes()
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        probe(port, result)
        time.sleep(0.05)
    stop.set()
    attacking.join(timeout=15)
    time.sleep(1.0)  # the attack has ended: within a second the workers are to be idle
    before = children_cpu_seconds(master_pid)
    time.sleep(1.0)
    idle_share = children_cpu_seconds(master_pid) - before
    return Outcome(name, result, idle_share, rounds[0] if rounds else 0)


def idle_cpu_share(port: int, master_pid: int, connections: int = 1000, seconds: float = 3.0) -> float:
    """The workers' CPU, as a share of one core, while `connections` idle connections are held."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(connections)]
    try:
        time.sleep(1.0)
        before = children_cpu_seconds(master_pid)
        time.sleep(seconds)
        return (children_cpu_seconds(master_pid) - before) / seconds
    finally:
        for sock in socks:
            sock.close()


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--attack", choices=sorted(ATTACKS), action="append")
    args = parser.parse_args()
    seconds = args.seconds or (2.0 if args.smoke else 10.0)
    env = {"WEB_CONCURRENCY": str(args.workers)}
    redis = None
    if args.store == "redis":
        redis = RedisServer(scratch("attacks"))
        env["PLANTS_STORE_URL"] = redis.unix_url
    server = gunicorn("attacked", env, pin=False).start()
    outcomes: list[dict] = []
    try:
        idle = idle_cpu_share(server.port, server.pid)
        outcomes.append({"store": args.store, "idle_connections": 1000, "idle_cpu_share": round(idle, 4)})
        print(json.dumps(outcomes[-1]), flush=True)
        for name in args.attack or list(ATTACKS):
            outcome = run(name, server.port, server.pid, seconds)
            outcomes.append({"store": args.store, "workers": args.workers, **outcome.summary()})
            print(json.dumps(outcomes[-1]), flush=True)
    finally:
        server.stop()
        if redis is not None:
            redis.stop()
    save(outcomes, "attacks", args.json)
    return 0
