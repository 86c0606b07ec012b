"""Two of `python -m bench watch`'s scenarios for filtered watchers (`GET /events?tags=…`):

- `creates`: create req/s (wrk, bench/lua/create.lua, tags no stream follows) with no stream
  open, then with M streams open each on a tag of its own, then with none again, and the ratio
  of the second run to the mean of the others.
- `snapshot`: P plants stored, then one `snapshot=true` stream read to the end of its initial
  events: the time to its first event and to its end, and the worker's RSS growth meanwhile
  (the peak, from VmHWM reset by /proc/PID/clear_refs, else sampled every 5 ms).
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.harness import TOKEN
from bench.harness.load import fill_store, wrk
from bench.harness.servers import Server, children, status_field

#: The servers' heartbeat (PLANTS_EVENTS_HEARTBEAT's default), in seconds.
HEARTBEAT = 15.0


def creates_beside_streams(
    server: Server, open_streams: Callable[[], list[socket.socket]], seconds: float
) -> dict:
    """Create req/s with no stream open, then with those `open_streams` opens (none of them
    follows the creates' tags: what holding them costs a write), then with none again: the
    ratio is to the mean of the two runs without, so that a warming server favours neither."""
    base = random.randrange(1, 1000) * 10**13
    before = wrk(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": str(base)})
    socks = open_streams()
    time.sleep(2.0)
    beside = wrk(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": str(base + 10**12)})
    for sock in socks:
        sock.close()
    # A closed stream that is sent nothing is noticed at its next heartbeat (15 s): until then
    # the server still holds it, and still wakes it.
    time.sleep(HEARTBEAT + 2.0)
    after = wrk(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": str(base + 2 * 10**12)})
    alone = (before["rps"] + after["rps"]) / 2
    return {
        "streams": len(socks),
        "rps_no_stream": [round(before["rps"], 1), round(after["rps"], 1)],
        "rps_with_streams": round(beside["rps"], 1),
        "ratio": round(beside["rps"] / alone, 3) if alone else -1,
        # The server's CPU per create: less noisy than req/s on a shared machine.
        "cpu_us_per_create": [round(run["cpu_us_per_request"], 1) for run in (before, beside, after)],
        "non2xx": sum(run.get("non2xx", 0) for run in (before, beside, after)),
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
