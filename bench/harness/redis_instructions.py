"""Redis's own instructions per operation of one tree's store: deterministic where CPU time is not.

    PYTHONPATH=TREE python bench/harness/redis_instructions.py [--count N] [--preload P]

A redis-server of its own runs under callgrind (`--hz 1`, so that its clock-driven work barely
counts), and one thread drives the store of TREE (its `app` first on the path) one call a round
trip, as a worker does: P creates to give the indexes their depth, then N creates of sequential
ids, N of random ids, replays, gets, N/10 pages of 100 (all, one tag, the feed), renames, moves
to another tag and deletes. `callgrind_control` zeroes the counts before each operation's batch
and dumps them after, so each figure is everything redis-server executed for that batch (reading,
the script, the answer, its event loop) per call. Slow (valgrind): N=300, P=3,000 take minutes.
Compare two trees by running it once with each; the figures move a few percent run to run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import redis

# This directory is first on sys.path when run as a script; the `bench` package may be another tree's.
from redis_cpu import random_ids  # type: ignore[import-not-found]

from app import store as stores


def _total(directory: Path) -> int:
    """The event total of the newest callgrind dump in `directory`."""
    newest = max(directory.glob("cg.out.*"), key=lambda path: path.stat().st_mtime)
    for line in newest.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"{newest}: no totals")


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--preload", type=int, default=3_000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-redis-instructions-"))
    sock = directory / "redis.sock"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={directory}/cg.out", "redis-server",
         "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no", "--hz", "1",
         "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(unix_socket_path=str(sock))
    deadline = time.monotonic() + 60
    while True:
        try:
            client.ping()
            break
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    store = stores.store_from_url(
        f"unix://{sock}", capacity=10**9, prefix="bench", connect_timeout=5, timeout=60,
        events_retain=100_000,  # the service's default
    )  # fmt: skip
    tags = ["fern", "palm", "cactus", "ivy"]

    def create(plant_id: int) -> object:
        return store.create(plant_id, f"Plant {plant_id % 10**6:06d}", tags[plant_id % 4])

    for n in range(args.preload):
        create(6 * 10**12 + n)
    sequential = [7 * 10**12 + n for n in range(args.count)]
    pages = sequential[: max(1, args.count // 10)]
    operations = [
        ("create (sequential ids)", create, sequential),
        ("create (random ids)", create, random_ids(args.count)),
        ("replay", create, sequential),
        ("get", store.get, sequential),
        ("page of 100", lambda _: store.page(None, 100), pages),
        ("tagged page of 100", lambda _: store.page(None, 100, ("fern",)), pages),
        ("page of 100 events", lambda _: store.events(None, 100), pages),
        ("rename", lambda plant_id: store.change(
            plant_id, f"Renamed {plant_id % 10**6:06d}", stores.KEEP, stores.UNCONDITIONAL, create=False
        ), sequential),
        ("retag", lambda plant_id: store.change(
            plant_id, stores.KEEP, tags[(plant_id + 1) % 4], stores.UNCONDITIONAL, create=False
        ), sequential),
        ("delete", store.delete, sequential),
    ]  # fmt: skip
    found = {}
    try:
        for name, operation, calls in operations:
            operation(-1)  # loads the script, if any, outside the count
            subprocess.run(["callgrind_control", "-z", str(server.pid)], capture_output=True, check=True)
            for call in calls:
                operation(call)
            subprocess.run(["callgrind_control", "-d", str(server.pid)], capture_output=True, check=True)
            found[name] = round(_total(directory) / len(calls))
    finally:
        store.close()
        server.terminate()
        server.wait()
    print(json.dumps(found))


if __name__ == "__main__":
    main()
