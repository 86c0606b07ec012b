"""Filtered watchers of the change feed (`GET /events?tags=…`), the scenarios of `python -m bench
watch` that measure a filtered watch:

- `filtered`: N streams, each on its own tag, then creates at R a second, each of one stream's
  tag (in turn): for each create, the time from its 200 to its arrival at that stream (p50, p99,
  max), how many arrived there once, how many arrived at another stream (none should), and the
  streams woken per write, read from the service's metric (a sample named `…woken…`).
- `creates`: create req/s (wrk, bench/lua/create.lua, tags no stream follows) with no stream
  open, then with the N filtered streams open, and their ratio.
- `snapshot`: P plants stored, then one `snapshot=true` stream read to the end of its initial
  events: the time to its first event and to its end, and the worker's RSS growth meanwhile
  (the peak, from VmHWM reset by /proc/PID/clear_refs, else sampled every 5 ms).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.harness import TOKEN
from bench.harness.load import fill_store, wrk
from bench.harness.servers import Server, children, status_field

_ID = re.compile(rb'"id":(\d+)')
_WOKEN = re.compile(r"woken")
#: What the filtered streams' tags begin with: no other plant of the benchmarks has such a tag.
TAG = "watched-"


def _stream_request(path: str, token: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


def open_filtered(port: int, count: int, token: str = TOKEN) -> list[socket.socket]:
    """`count` streams from now, the n-th on the tag TAG + n alone."""
    socks = []
    for number in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(_stream_request(f"/events?after=now&tags={TAG}{number}", token))
        sock.setblocking(False)
        socks.append(sock)
    return socks


def metrics_text(port: int, token: str = TOKEN) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        return response.read().decode() if response.status == 200 else ""
    finally:
        conn.close()


def _samples(text: str) -> dict[str, float]:
    """Each sample's name with its labels summed over: the families' totals."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def woken_per_write(before: str, after: str) -> float | None:
    """Streams woken per write between two expositions: a histogram or summary named `…woken…`
    (its sum over its count), else a counter `…woken…_total` over the events appended; None when
    the service exposes neither."""
    first, last = _samples(before), _samples(after)

    def delta(name: str) -> float:
        return last.get(name, 0.0) - first.get(name, 0.0)

    for name in last:
        if _WOKEN.search(name) and name.endswith("_sum"):
            count = delta(name.removesuffix("_sum") + "_count")
            return round(delta(name) / count, 3) if count else None
    appended = delta("plants_events_appended_total")
    for name in last:
        if _WOKEN.search(name) and name.endswith("_total") and appended:
            return round(delta(name) / appended, 3)
    return None


def _percentile(values: list[float], share: float) -> float:
    return round(values[min(len(values) - 1, int(share * len(values)))], 2) if values else -1


class Arrivals:
    """What each stream received, read on one selector in a thread: plant id -> arrival times, per stream."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.selector = selectors.DefaultSelector()
        self.stream_of = {sock.fileno(): number for number, sock in enumerate(socks)}
        self.seen: list[dict[int, list[float]]] = [{} for _ in socks]
        self.rest = {sock.fileno(): b"" for sock in socks}
        for sock in socks:
            self.selector.register(sock, selectors.EVENT_READ)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stop.is_set():
            for key, _ in self.selector.select(0.1):
                try:
                    data = key.fileobj.recv(262144)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                now = time.monotonic()
                # A read can end inside an event: only whole blocks are parsed.
                whole, _, self.rest[key.fd] = (self.rest[key.fd] + data).rpartition(b"\n\n")
                seen = self.seen[self.stream_of[key.fd]]
                for match in _ID.finditer(whole):
                    seen.setdefault(int(match.group(1)), []).append(now)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def filtered_wake(port: int, count: int, rate: float, seconds: float, token: str = TOKEN) -> dict:
    """`count` streams on a tag each, creates at `rate` for `seconds`, each to one stream's tag."""
    socks = open_filtered(port, count, token)
    arrivals = Arrivals(socks)
    time.sleep(2.0)
    before = metrics_text(port, token)
    written: dict[int, tuple[float, int]] = {}
    first = 8 * 10**12 + int(time.time() * 1000) % 10**9 * 1000
    _creates(port, first, count, rate, seconds, written, token)
    time.sleep(3.0)
    after = metrics_text(port, token)
    arrivals.close()
    for sock in socks:
        sock.close()
    latencies, once, elsewhere = [], 0, 0
    for plant_id, (at, stream) in written.items():
        times = arrivals.seen[stream].get(plant_id, [])
        once += len(times) == 1
        latencies += [(arrival - at) * 1000 for arrival in times]
        elsewhere += sum(plant_id in seen for number, seen in enumerate(arrivals.seen) if number != stream)
    latencies.sort()
    return {
        "streams": count,
        "creates": len(written),
        "rate": rate,
        "arrived_once_at_its_stream": once,
        "arrived_at_another_stream": elsewhere,
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "max_ms": round(latencies[-1], 2) if latencies else -1,
        "streams_woken_per_write": woken_per_write(before, after),
    }


def _creates(
    port: int, first: int, streams: int, rate: float, seconds: float, written: dict, token: str
) -> None:
    """Creates at `rate` on a schedule (open loop), the n-th tagged for stream n % `streams`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    start = time.monotonic()
    n = 0
    while n / rate < seconds:
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
        plant_id, stream = first + n, n % streams
        conn.request(
            "POST", "/plants", json.dumps({"id": plant_id, "name": "w", "tag": f"{TAG}{stream}"}), headers
        )
        response = conn.getresponse()
        response.read()
        if response.status == 200:
            written[plant_id] = (time.monotonic(), stream)
        n += 1
    conn.close()


def creates_beside_streams(server: Server, count: int, seconds: float, token: str = TOKEN) -> dict:
    """Create req/s with no stream open, then with `count` filtered streams open (none of them
    follows the creates' tags: what holding them costs a write)."""
    base = random.randrange(1, 1000) * 10**13
    alone = wrk(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": str(base)})
    socks = open_filtered(server.port, count, token)
    arrivals = Arrivals(socks)  # read what they send (the heartbeats), as a client does
    time.sleep(2.0)
    beside = wrk(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": str(base + 10**12)})
    arrivals.close()
    for sock in socks:
        sock.close()
    return {
        "streams": count,
        "rps_no_stream": round(alone["rps"], 1),
        "rps_with_streams": round(beside["rps"], 1),
        "ratio": round(beside["rps"] / alone["rps"], 3) if alone["rps"] else -1,
        "non2xx": alone.get("non2xx", 0) + beside.get("non2xx", 0),
    }


def load_plants(server: Server, plants: int, redis_url: str | None, prefix: str) -> None:
    """`plants` plants in the store: through the store itself on Redis, else through creates on
    four keep-alive connections."""
    base = 7 * 10**15
    if redis_url is not None:
        fill_store(redis_url, prefix, ((base + n, f"Plant {n:07d}", f"t{n % 50}") for n in range(plants)))
        return

    def create(first: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        for n in range(first, plants, 4):
            body = json.dumps({"id": base + n, "name": f"Plant {n:07d}", "tag": f"t{n % 50}"})
            conn.request("POST", "/plants", body, headers)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"preload answered {response.status}")
        conn.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(4)))


def _read_snapshot(
    response: http.client.HTTPResponse, sent: float, deadline: float
) -> tuple[float | None, int, bool]:
    """Read a snapshot stream to its `initial_end` bookmark, or to `deadline`: the milliseconds
    to its first `plant.existing`, how many it sent, and whether it ended its initial events."""
    first_ms, existing, tail = None, 0, b""
    marker, end = b"event: plant.existing", b'"initial_end"'
    while response.status == 200 and time.monotonic() < deadline:
        try:
            data = tail + response.read1(262144)
        except TimeoutError:
            break
        if len(data) == len(tail):
            break
        if first_ms is None and marker in data:
            first_ms = round((time.monotonic() - sent) * 1000, 1)
        existing += data.count(marker)
        if end in data:
            return first_ms, existing, True
        tail = data[-len(marker) + 1 :]  # a marker split over two reads is counted once, whole
    return first_ms, existing, False


def snapshot(server: Server, plants: int, token: str = TOKEN) -> dict:
    """One `snapshot=true` stream read to the end of its initial events (or for a minute more
    than 2,000 plants a second would take), and the worker's RSS meanwhile."""
    worker = children(server.pid)[0]
    rss_before = status_field(worker, "VmRSS")
    try:
        Path(f"/proc/{worker}/clear_refs").write_text("5")  # the peak RSS starts again from now
        hwm = True
    except OSError:
        hwm = False
    peak = [rss_before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], status_field(worker, "VmRSS"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    sent = time.monotonic()
    conn.request(
        "GET",
        "/events?snapshot=true",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    )
    response = conn.getresponse()
    first_ms, existing, ended = _read_snapshot(response, sent, sent + 60 + plants / 2000)
    seconds = time.monotonic() - sent
    done.set()
    sampler.join(5)
    conn.close()
    top = max(peak[0], status_field(worker, "VmHWM")) if hwm else peak[0]
    return {
        "status": response.status,
        "ended": ended,
        "existing": existing,
        "first_event_ms": first_ms,
        "seconds": round(seconds, 2),
        "worker_rss_growth_mib": round((top - rss_before) / 1024, 1),
        "peak_from": "VmHWM" if hwm else "samples",
    }
