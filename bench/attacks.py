"""The HTTP-framing attacks on the worker, each held while an honest client probes `/healthz`.

    python -m bench attacks                          # every attack, memory store, 10 s each
    python -m bench attacks --store redis --workers 2 --attack chunk-extensions
    python -m bench attacks --smoke                  # 2 s each

- `half-open`: connections that send part of a request and close: 1,000 a second (`POST
  /healthz`, `Content-Length: 100`, 3 body bytes), and one that sends only a request line;
- `dribble`: 1,000 connections each dribbling a body at 1 byte a second (the worker's cap);
- `chunk-extensions`: 40 connections each sending `1;e=<100 a>\\r\\nx\\r\\n` 5,000 times, no last chunk;
- `pipeline`: one client pipelining 2,500 `HEAD /plants` with a wrong token, reading promptly.

Each attack's line also has the longest accept queue and the host's TCP memory seen at a probe's
start (`accept_queue_max`, `tcp_memory_mb_peak`): a probe waits behind every connection queued
before it, and past `tcp_mem`'s pressure threshold every socket on the host is held back.

And the attacks on the worker's resources (`RESOURCE_ATTACKS`), each with the workers' RSS before,
at its height and after:

- `slow-readers`: 1,000 connections with a 4 KiB receive buffer ask for the API page's
  `swagger-ui-bundle.js` (1.48 MB) and never read;
- `lingering`: 500 `Connection: close` requests a second whose clients keep their sockets open;
- `descriptors`: the workers' open-file limit lowered to 1,024 (prlimit, after start) and 2,000
  idle connections held, reopened as they are closed: `accept()` meets EMFILE (the log lines
  it writes are counted);
- `positions`: a read-only token opens server-sent-event streams with `Last-Event-ID` at 3,000
  distinct positions of a feed of 3,000 events (created first, before RSS is read), each read to
  its first event and closed, 8 at a time, no write (`--together 2`: two at each position, so
  that each read is shared and kept); it runs until every position is read, and the worker's
  shared-read gauges are read after it;
- `redis-stall` (`--store redis` only): 100 long-polls parked (`wait=55`), then redis-server
  stopped (SIGSTOP) for the probing time and continued (SIGCONT); then a create, and how long the
  service took to store it and to answer every long-poll with it.

First, the workers' CPU while 1,000 idle connections are held. Then the probe opens a new
connection for each `GET /healthz`, every 50 ms. After each attack ends, the workers' CPU is
measured over the next second: the goal is idle.
tests/integration/test_attacks.py runs each framing attack, shorter; the watch's, in their own
form: tests/integration/test_watch_shared_reads.py and tests/integration/test_watch_liveness.py.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import itertools
import json
import re
import resource
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.harness import TOKEN
from bench.harness.load import Probes, attack, attackers, call, get_json, put_plants
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import RedisServer, children, children_cpu_seconds, gunicorn, scratch, status_field

HALF_OPEN = b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"
REQUEST_LINE_ONLY = b"GET /healthz HTTP/1.1\r\n"
CHUNK_HEAD = b"POST /plants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
CHUNKS = (b"1;e=" + b"a" * 100 + b"\r\nx\r\n") * 5000
BUNDLE = b"GET /docs/assets/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n"
CLOSING = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
PIPELINED = b"HEAD /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n" * 2500
#: A read-only token (PLANTS_READ_TOKENS): it may watch the feed, never write.
READER = "bench-reader"
STREAM_AT = (
    "GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
    "Accept: text/event-stream\r\nLast-Event-ID: {cursor}\r\n\r\n"
)
_EVENT_ID = re.compile(rb"^id: (\S+)$", re.MULTILINE)
#: The attacks that end when they have done their work: probed until then, however long.
RUN_TO_THE_END = {"positions"}


@dataclass
class Outcome:
    attack: str
    probe: Probes
    idle_cpu_share: float  # of one core, the workers' CPU in the second after the attack ended
    rounds: int = 0
    notes: list[str] = field(default_factory=list)
    rss_mb: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the workers' RSS before, at the height, after
    cpu_share: float = 0.0  # of one core, the workers' CPU while the attack was held
    seconds: float = 0.0  # how long it was probed
    found: dict = field(default_factory=dict)  # what an attack measured itself (`redis-stall`)

    def summary(self) -> dict:
        return {
            "attack": self.attack,
            **self.probe.summary(),
            "probes_over_100_ms": sum(1 for latency in self.probe.latencies_ms if latency > 100),
            "idle_cpu_share": round(self.idle_cpu_share, 3),
            "attack_cpu_share": round(self.cpu_share, 3),
            "probed_seconds": round(self.seconds, 1),
            "rss_mb_before_height_after": [round(rss, 1) for rss in self.rss_mb],
            "rounds": self.rounds,
            **self.found,
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


def _room_for(sockets: int) -> None:
    """This process may open `sockets` more (its soft open-file limit raised to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < sockets + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def slow_readers(port: int, stop: threading.Event, connections: int = 1000, request: bytes = BUNDLE) -> int:
    """Connections that send `request` (for the 1.48 MB bundle) with a 4 KiB receive buffer and
    never read; one closed by the server is opened again. The number opened."""

    def reader() -> socket.socket:
        sock = socket.socket()
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(2)
            sock.connect(("127.0.0.1", port))
            sock.sendall(request)
        except OSError:
            sock.close()
            raise
        return sock

    return _hold(stop, connections, reader)


def _hold(stop: threading.Event, connections: int, connect: Callable[[], socket.socket]) -> int:
    """`connections` sockets from `connect` held until `stop`, each the server closes opened again."""
    _room_for(connections)
    opened = 0
    held: list[socket.socket] = []
    while not stop.is_set():
        held = [sock for sock in held if _open(sock)]
        while len(held) < connections and not stop.is_set():
            try:
                held.append(connect())
            except OSError:
                break
            opened += 1
        stop.wait(0.5)
    for sock in held:
        sock.close()
    return opened


def _open(sock: socket.socket) -> bool:
    """False (and closed) when the server has closed `sock`, as far as a peek shows."""
    try:
        sock.setblocking(False)
        try:
            sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        except OSError:
            pass
        else:
            return True  # unread answer bytes: the connection is still there
    finally:
        sock.settimeout(2)
    sock.close()
    return False


def lingering(port: int, stop: threading.Event, per_second: int = 500) -> int:
    """`Connection: close` requests whose clients keep their sockets open for 3 s, unread."""
    _room_for(per_second * 4)
    sent = 0
    held: collections.deque[tuple[float, socket.socket]] = collections.deque()
    while not stop.is_set():
        started = time.monotonic()
        for _ in range(per_second // 10):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.sendall(CLOSING)
            except OSError:
                continue
            held.append((started, sock))
            sent += 1
        while held and held[0][0] < started - 3.0:
            held.popleft()[1].close()
        stop.wait(max(0.0, started + 0.1 - time.monotonic()))
    for _, sock in held:
        sock.close()
    return sent


def descriptors(port: int, stop: threading.Event, connections: int = 2000) -> int:
    """Idle connections, `connections` of them held, each one the server closes opened again."""
    return _hold(stop, connections, lambda: socket.create_connection(("127.0.0.1", port), timeout=2))


def feed_positions(port: int, count: int) -> list[str]:
    """`count` plants created, one event each; the feed's position before each of them (the
    position before the first, then each event's `id:` in a stream from there): from each, a
    stream has an event to send."""
    start = get_json(port, "/events?after=now")["next"]
    put_plants(port, 7 * 10**12 + int(time.time()) % 10**6 * 10**4, count)
    cursors = [start]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(STREAM_AT.format(token=TOKEN, cursor=start).encode())
        rest = b""
        while len(cursors) < count:
            data = sock.recv(262144)
            if not data:
                raise RuntimeError(f"the stream ended after {len(cursors)} of {count} events")
            whole, _, rest = (rest + data).rpartition(b"\n\n")
            cursors += [match.decode() for match in _EVENT_ID.findall(whole)]
    return cursors[:count]


def positions(
    port: int, stop: threading.Event, cursors: list[str], together: int = 1, streams: int = 8
) -> dict:
    """Streams of the read-only token at each of `cursors` (`together` at each), each read to its
    first event and closed, `streams` at a time, until every position is read or `stop`: how many
    sent an event, and what the worker's shared reads keep after them."""
    work = itertools.chain.from_iterable(itertools.repeat(cursor, together) for cursor in cursors)
    lock = threading.Lock()
    read: list[int] = []

    def one() -> None:
        while not stop.is_set():
            with lock:
                cursor = next(work, None)
            if cursor is None:
                return
            read.append(_first_event(port, cursor))

    threads = [threading.Thread(target=one, daemon=True) for _ in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"rounds": sum(read), "positions": len(cursors), "together": together, **shared_reads_kept(port)}


def _first_event(port: int, cursor: str) -> int:
    """1 when a stream from `cursor` sent an event before it was closed, else 0."""
    data = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(STREAM_AT.format(token=READER, cursor=cursor).encode())
            while b"\ndata: " not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return 0
                data += chunk
    except OSError:
        return 0
    return int(data.startswith(b"HTTP/1.1 200 "))


def shared_reads_kept(port: int) -> dict[str, float]:
    """The worker's gauges of the watch's shared reads (entries and bytes), from `/metrics`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    body = conn.getresponse().read().decode()
    conn.close()
    return {
        name: float(value)
        for name, _, value in (line.partition(" ") for line in body.splitlines())
        if name in ("plants_watch_shared_reads", "plants_watch_shared_read_bytes")
    }


def redis_stall(port: int, stop: threading.Event, redis: RedisServer, long_polls: int = 100) -> dict:
    """`long_polls` parked, redis-server stopped until `stop`, then continued: what recovery took."""
    after = get_json(port, "/events?after=now")["next"]
    answers: list[tuple[int, list[int]]] = []
    polls = [threading.Thread(target=_long_poll, args=(port, after, answers)) for _ in range(long_polls)]
    for poll in polls:
        poll.daemon = True
        poll.start()
    time.sleep(0.5)  # parked: run() probes from 1 s on
    redis.signal(signal.SIGSTOP)
    try:
        stop.wait()
    finally:
        redis.signal(signal.SIGCONT)
    return {"rounds": 1, **_recovery(port, polls, answers)}


def _long_poll(port: int, after: str, answers: list[tuple[int, list[int]]]) -> None:
    """One long-poll of the read-only token: its status and the ids of the plants it answered."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=70)
    try:
        conn.request("GET", f"/events?after={after}&wait=55", headers={"Authorization": f"Bearer {READER}"})
        response = conn.getresponse()
        body = json.loads(response.read() or b"{}")
        answers.append((response.status, [event["plant"]["id"] for event in body.get("events", [])]))
    except (OSError, ValueError, http.client.HTTPException):
        answers.append((0, []))
    finally:
        conn.close()


def _recovery(port: int, polls: list[threading.Thread], answers: list[tuple[int, list[int]]]) -> dict:
    """Seconds from now (redis-server continued) to a stored create, and to every long-poll's
    answer; how many answered 200 with that create (within 12 s)."""
    continued = time.monotonic()
    plant_id, status = 6 * 10**12 + int(time.time() * 1000) % 10**9, 0
    while status != 200 and time.monotonic() < continued + 12:
        try:
            status = call(port, "POST", "/plants", {"id": plant_id, "name": "after the stall"}, timeout=5)[0]
        except OSError:
            time.sleep(0.1)
    written = time.monotonic() - continued
    for poll in polls:
        poll.join(max(0.0, continued + 12 - time.monotonic()))
    return {
        "create_status_after_sigcont": status,
        "seconds_to_a_stored_create": round(written, 3),
        "seconds_to_answer_the_long_polls": round(time.monotonic() - continued, 3),
        "long_polls": len(polls),
        "long_polls_answered_with_it": sum(1 for code, ids in answers if code == 200 and ids == [plant_id]),
    }


def workers_rss_mb(master_pid: int) -> float:
    """The workers' resident memory, in MB."""
    return sum(status_field(pid, "VmRSS") for pid in children(master_pid)) / 1024


def lower_open_files(master_pid: int, limit: int) -> None:
    """The workers' soft open-file limit, lowered after they started (as systemd's default)."""
    for pid in children(master_pid):
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))


RESOURCE_ATTACKS: dict[str, Callable[..., Any]] = {
    "slow-readers": slow_readers,
    "lingering": lingering,
    "descriptors": descriptors,
    "positions": positions,
}

#: The attacks that need the Redis store (`--store redis`).
STORE_FAULTS: dict[str, Callable[..., Any]] = {"redis-stall": redis_stall}


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


def accept_queue(port: int) -> int:
    """The connections waiting to be accepted on the listening socket of `port` (its rx_queue in
    /proc/net/tcp): a probe that connects now waits behind each of them."""
    with open("/proc/net/tcp") as table:
        for line in table:
            fields = line.split()
            if fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                return int(fields[4].partition(":")[2], 16)
    return 0


def tcp_memory_mb() -> float:
    """The TCP memory of the whole host (/proc/net/sockstat): past `tcp_mem`'s pressure threshold
    every socket on it is held back, a slow reader's send queue included in the count."""
    with open("/proc/net/sockstat") as stats:
        for line in stats:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1]) * resource.getpagesize() / 1e6
    return 0.0


def run(
    name: str, port: int, master_pid: int, seconds: float, min_probes: int = 0, **options: Any
) -> Outcome:
    """Hold attack `name` for `seconds` while probing; then the workers' CPU in the next second.
    With `min_probes`, probing goes on past `seconds` (three times as long at most) until that
    many probes are in: a loaded machine reads /proc/net/tcp's thousands of rows slowly, and a
    p99 of a dozen probes says little."""
    stop = threading.Event()
    done: list[Any] = []  # the attack's rounds, or a dict of what it measured with its "rounds"
    attacks = {**ATTACKS, **RESOURCE_ATTACKS, **STORE_FAULTS}
    rss_before = workers_rss_mb(master_pid)
    attacking = threading.Thread(
        target=lambda: done.append(attacks[name](port, stop, **options)), daemon=True
    )
    attacking.start()
    time.sleep(1.0)  # the attack under way
    result = Probes()
    cpu_before, started = children_cpu_seconds(master_pid), time.monotonic()
    ends = started + seconds
    height = 0.0
    queued, tcp_memory = 0, 0.0
    enough_by = started + 3 * seconds
    while (
        time.monotonic() < ends
        or (name in RUN_TO_THE_END and attacking.is_alive())
        or (len(result.latencies_ms) < min_probes and time.monotonic() < enough_by)
    ):
        queued, tcp_memory = max(queued, accept_queue(port)), max(tcp_memory, tcp_memory_mb())
        probe(port, result)
        height = max(height, workers_rss_mb(master_pid))
        time.sleep(0.05)
    probed = time.monotonic() - started
    cpu_share = (children_cpu_seconds(master_pid) - cpu_before) / probed
    stop.set()
    attacking.join(timeout=15)
    time.sleep(1.0)  # the attack has ended: within a second the workers are to be idle
    before = children_cpu_seconds(master_pid)
    time.sleep(1.0)
    idle_share = children_cpu_seconds(master_pid) - before
    rss = (rss_before, height, workers_rss_mb(master_pid))
    found = dict(done[0]) if done and isinstance(done[0], dict) else {"rounds": done[0] if done else 0}
    rounds = found.pop("rounds")
    # Why a probe waited (bench/README.md, the slow readers and the lingering flood).
    found.update(accept_queue_max=queued, tcp_memory_mb_peak=round(tcp_memory, 1))
    return Outcome(
        name, result, idle_share, rounds, rss_mb=rss, cpu_share=cpu_share, seconds=probed, found=found
    )


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


def options_for(name: str, args: argparse.Namespace, port: int, redis: RedisServer | None) -> dict:
    """What attack `name` is given beside its port: the feed's positions (made here, before the
    RSS is read), or the redis-server to stop."""
    if name == "positions":
        count = args.positions or (300 if args.smoke else 3000)
        return {"cursors": feed_positions(port, count), "together": args.together}
    if name == "redis-stall":
        return {"redis": redis, "long_polls": args.long_polls or (20 if args.smoke else 100)}
    return {}


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--attack", choices=sorted({**ATTACKS, **RESOURCE_ATTACKS, **STORE_FAULTS}), action="append"
    )
    parser.add_argument("--positions", type=int, help="positions: how many (3,000; smoke 300)")
    parser.add_argument("--together", type=int, default=1, help="positions: streams at each (1)")
    parser.add_argument("--long-polls", type=int, help="redis-stall: how many parked (100; smoke 20)")
    args = parser.parse_args()
    if args.store == "memory" and set(args.attack or ()) & set(STORE_FAULTS):
        parser.error("redis-stall needs --store redis")
    seconds = args.seconds or (2.0 if args.smoke else 10.0)
    env = {"WEB_CONCURRENCY": str(args.workers), "PLANTS_READ_TOKENS": READER}
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
        for name in args.attack or [*ATTACKS, *RESOURCE_ATTACKS, *(STORE_FAULTS if redis else ())]:
            if name == "descriptors":
                lower_open_files(server.pid, 1024)
            options = options_for(name, args, server.port, redis)
            outcome = run(name, server.port, server.pid, seconds, **options)
            outcomes.append({"store": args.store, "workers": args.workers, **outcome.summary()})
            print(json.dumps(outcomes[-1]), flush=True)
    finally:
        server.stop()
        if redis is not None:
            redis.stop()
    save(outcomes, "attacks", args.json)
    return 0
