"""A reload (SIGHUP) of the memory store at scale: its pause, its peak memory, and what it loses.

    python -m bench reload                        # 10,000, 100,000 and 1,000,000 plants
    python -m bench reload --plants 100000 --writers 4 --watchers 4
    python -m bench reload --smoke

For each size: the store is filled in this process as the service's creates fill it (with the
feed's events) and written where the handoff's snapshot goes, so that the service's first
worker reads it as a master's unread snapshot (app/server/handoff.py); then, while `--writers`
clients create (a new connection each, as test_reload.py's) and `--watchers` follow the feed
from `after=now`, by long-polls and by server-sent events in turn (each resuming from its cursor
after any error), the master gets SIGHUP. Measured: the longest wait of one create (the pause),
the longest gap between two answers after the SIGHUP, the old and new workers' peak RSS, and the
peak of their RSS with the snapshot and its reservation (sampled every 20 ms): the handoff's
directory is on /dev/shm, as systemd's RuntimeDirectory= is on a tmpfs, whose pages count in the
service's memory. Checked: no request failed, every acknowledged plant and the seeded ones are
there (`plants_stored`), and every watcher saw each acknowledged create exactly once.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from app.server.directories import SHARED_MEMORY, handoff_key
from app.server.handoff import SNAPSHOT
from app.store.memory import snapshot as snapshots
from app.store.memory.store import MemoryPlantStore
from bench.harness import ROOT
from bench.harness.report import benchmark_parser, finish, validity
from bench.harness.servers import children, gunicorn, status_field
from tests.feed_client import Stream
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
TAGS = ("fern", "succulent", "tropical", "vine", "flowering")


def fill(plants: int, retain: int) -> MemoryPlantStore:
    store = MemoryPlantStore(2 * plants, retain)
    for n in range(plants):
        store.create(n + 1, f"Plant {n:07d}", TAGS[n % len(TAGS)], origin=f"{n:032x}")
    return store


def request(port: int, method: str, path: str, body: Any = None, timeout: float = 120) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=AUTH)
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data.startswith(b"{") else data.decode()
    finally:
        conn.close()


class Load:
    """Writers and watchers, each in a thread, until `stop`."""

    def __init__(self, port: int, writers: int, watchers: int, first_id: int) -> None:
        self.port, self.stop, self.watched = port, threading.Event(), threading.Event()
        self.answers: list[tuple[float, float]] = []  # each create's (sent, answered)
        self.acknowledged: list[int] = []
        self.failures: list[str] = []
        self.seen: list[list[int]] = [[] for _ in range(watchers)]
        self.gone: list[int] = [0] * watchers  # 410s: a position no longer kept
        cursors = [request(port, "GET", "/events?after=now")[1]["next"] for _ in range(watchers)]
        self.threads = [
            *(
                threading.Thread(target=self.write, args=(first_id + n, writers), name=f"write-{n}")
                for n in range(writers)
            ),
            *(
                threading.Thread(
                    target=(self.stream, self.poll)[n % 2], args=(n, cursors[n]), name=f"watch-{n}"
                )
                for n in range(watchers)
            ),
        ]
        for thread in self.threads:
            thread.start()

    def write(self, plant_id: int, step: int) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                status, body = request(self.port, "POST", "/plants", {"id": plant_id, "name": "Fern"})
            except OSError as exc:
                self.failures.append(f"create {plant_id}: {exc!r}")
            else:
                if status == 200:
                    self.acknowledged.append(plant_id)
                    self.answers.append((sent, time.monotonic()))
                else:
                    self.failures.append(f"create {plant_id}: {status} {str(body)[:200]}")
            plant_id += step

    def poll(self, index: int, cursor: str) -> None:
        """A long-poll watcher."""
        while not self.watched.is_set():
            try:
                status, body = request(self.port, "GET", f"/events?after={cursor}&wait=2&limit=1000")
            except OSError:
                time.sleep(0.05)  # the worker stopped mid-wait: resume from the same cursor
                continue
            if status == 410:
                self.gone[index] += 1
                return
            if status != 200:
                self.failures.append(f"watch: {status} {str(body)[:200]}")
                return
            self.seen[index].extend(event["plant"]["id"] for event in body["events"])
            cursor = body["next"]

    def stream(self, index: int, cursor: str) -> None:
        """A server-sent events watcher, resuming with `Last-Event-ID` as docs/change-feed.md's client."""
        while not self.watched.is_set():
            stream = None
            try:
                stream = Stream(self.port, "/events", cursor, timeout=2)
                if stream.status != 200:
                    self.gone[index] += stream.status == 410
                    self.failures.extend([] if stream.status == 410 else [f"stream: {stream.status}"])
                    return
                for block in stream.blocks():
                    if block.get("event") == "gone":
                        self.gone[index] += 1
                        return
                    if "data" in block:
                        self.seen[index].append(json.loads(block["data"])["plant"]["id"])
                        cursor = block["id"]
                    if self.watched.is_set():
                        return
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)  # the stream ended or stalled (the worker stopped): resume from the cursor
            finally:
                if stream is not None:
                    stream.close()

    def finish(self, settle: float) -> None:
        """Stop writing, give the watchers `settle` seconds to read the last events, stop them."""
        self.stop.set()
        writers = [thread for thread in self.threads if thread.name.startswith("write")]
        for thread in writers:
            thread.join(130)
        deadline = time.monotonic() + settle
        wanted = len(self.acknowledged)
        while time.monotonic() < deadline and any(len(seen) < wanted for seen in self.seen):
            time.sleep(0.05)
        self.watched.set()
        for thread in self.threads:
            thread.join(130)


class Memory:
    """Every 20 ms: each worker's RSS and the snapshot's blocks, and their largest sum."""

    def __init__(self, master: int, directory: Path) -> None:
        self.master, self.directory, self.stop = master, directory, threading.Event()
        self.rss: dict[int, int] = {}
        self.snapshot = self.total = 0
        self.thread = threading.Thread(target=self.sample)
        self.thread.start()

    def sample(self) -> None:
        while not self.stop.wait(0.02):
            total = 0
            for pid in children(self.master):
                try:
                    rss = status_field(pid, "VmRSS") * 1024
                except (OSError, LookupError):
                    continue
                self.rss[pid] = max(self.rss.get(pid, 0), rss)
                total += rss
            files = 0
            for path in self.directory.glob("store.*"):  # the snapshot, its reservation (.partial)
                try:
                    files += path.stat().st_blocks * 512
                except OSError:
                    continue
            self.snapshot = max(self.snapshot, files)
            self.total = max(self.total, total + files)

    def done(self) -> None:
        self.stop.set()
        self.thread.join()


def one_size(plants: int, retain: int, writers: int, watchers: int, problems: list[str]) -> dict:
    # systemd's RuntimeDirectory= is a tmpfs: the snapshot's pages count in the service's memory.
    shm = SHARED_MEMORY if SHARED_MEMORY.is_dir() else None
    runtime = Path(tempfile.mkdtemp(prefix="bench-reload-", dir=shm))
    server = gunicorn(f"{plants} plants", {
        "RUNTIME_DIRECTORY": str(runtime), "PLANTS_MAX_PLANTS": str(2 * plants + 10**6),
        "PLANTS_EVENTS_RETAIN": str(retain), "GUNICORN_THREADS": "4", "PLANTS_API_TOKENS": TOKEN,
    }, pin=False)  # fmt: skip
    directory = runtime / f"plant-store-handoff-{handoff_key(ROOT, [f'127.0.0.1:{server.port}'])}"
    directory.mkdir(mode=0o700)
    began = time.monotonic()
    snapshots.write(fill(plants, retain), directory / SNAPSHOT)
    found: dict[str, Any] = {"plants": plants, "seed_s": round(time.monotonic() - began, 1)}
    server.start_s = 120
    server.start()
    try:
        assert request(server.port, "GET", "/metrics")[0] == 200
        old = children(server.pid)
        memory = Memory(server.pid, directory)
        load = Load(server.port, writers, watchers, 10**12)
        time.sleep(1)
        server.process.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        sighup = time.monotonic()
        deadline = sighup + 300
        while not (set(children(server.pid)) - set(old)) or len(load.answers) < 50 + _after(load, sighup):
            if time.monotonic() > deadline:
                problems.append(f"{plants}: no new worker serving 300 s after SIGHUP")
                break
            time.sleep(0.05)
        time.sleep(1)
        load.finish(3)
        memory.done()
        found.update(measure(load, memory, old, sighup))
        found.update(check(server.port, plants, load, problems))
    finally:
        server.stop()
        shutil.rmtree(runtime, ignore_errors=True)
    return found


def _after(load: Load, moment: float) -> int:
    return sum(1 for sent, _ in load.answers if sent < moment)


def measure(load: Load, memory: Memory, old: list[int], sighup: float) -> dict:
    waits = [answered - sent for sent, answered in load.answers]
    ends = sorted(answered for _, answered in load.answers)
    gaps = [after - before for before, after in itertools.pairwise(ends) if after > sighup]
    new = [pid for pid in memory.rss if pid not in old]
    return {
        "pause_s": round(max(waits, default=0), 3),
        "gap_s": round(max(gaps, default=0), 3),
        "old_rss_mib": round(max((memory.rss.get(pid, 0) for pid in old), default=0) / 2**20, 1),
        "new_rss_mib": round(max((memory.rss[pid] for pid in new), default=0) / 2**20, 1),
        "snapshot_mib": round(memory.snapshot / 2**20, 1),
        "peak_total_mib": round(memory.total / 2**20, 1),
    }


def check(port: int, plants: int, load: Load, problems: list[str]) -> dict:
    problems.extend(f"{plants}: {failure}" for failure in load.failures[:20])
    missing = [
        plant_id for plant_id in load.acknowledged if request(port, "GET", f"/plants/{plant_id}")[0] != 200
    ]
    if missing:
        problems.append(f"{plants}: {len(missing)} acknowledged plants missing, e.g. {missing[:5]}")
    metrics = request(port, "GET", "/metrics")[1]
    stored = next(
        int(float(line.split()[-1])) for line in metrics.splitlines() if line.startswith("plants_stored ")
    )
    if stored != plants + len(load.acknowledged):
        problems.append(f"{plants}: plants_stored {stored}, not {plants} + {len(load.acknowledged)}")
    wanted = sorted(load.acknowledged)
    for index, seen in enumerate(load.seen):
        if load.gone[index]:
            continue  # a documented 410: the watcher starts again
        if sorted(seen) != wanted:
            extra, lost = len(seen) - len(set(seen)), len(set(wanted) - set(seen))
            problems.append(f"{plants}: watcher {index} saw {extra} events twice and missed {lost}")
    seen = [len(seen) for seen in load.seen]
    return {
        "acknowledged": len(wanted),
        "failures": len(load.failures),
        "watchers_gone": sum(load.gone),
        "seen": seen,
    }


def main() -> int:
    parser = benchmark_parser(__doc__)
    sizes = "a size (repeat it; default 10,000, 100,000 and 1,000,000; smoke 2,000)"
    parser.add_argument("--plants", type=int, action="append", help=sizes)
    parser.add_argument("--retain", type=int, default=100_000, help="PLANTS_EVENTS_RETAIN")
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--watchers", type=int, default=2)
    args = parser.parse_args()
    sizes = args.plants or ([2_000] if args.smoke else [10_000, 100_000, 1_000_000])
    problems: list[str] = []
    results: dict = {"retain": args.retain, "writers": args.writers, "watchers": args.watchers, "sizes": []}
    os.chdir(ROOT)
    for plants in sizes:
        results["sizes"].append(one_size(plants, args.retain, args.writers, args.watchers, problems))
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    lines = [
        f"Reload under {results['writers']} creating clients and {results['watchers']} watchers"
        f" (PLANTS_EVENTS_RETAIN={results['retain']}):",
        "",
        "| plants | pause (s) | gap (s) | old worker RSS (MiB) | new worker RSS (MiB) | snapshot (MiB)"
        " | peak RSS + snapshot (MiB) | acknowledged | failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for size in results["sizes"]:
        lines.append(
            f"| {size['plants']:,} | {size['pause_s']} | {size['gap_s']} | {size['old_rss_mib']}"
            f" | {size['new_rss_mib']} | {size['snapshot_mib']} | {size['peak_total_mib']}"
            f" | {size['acknowledged']} | {size['failures']} |"
        )
    return "\n".join([*lines, "", validity(results, "VALID: no request failed, no plant or event lost.")])
