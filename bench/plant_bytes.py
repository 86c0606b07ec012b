"""The memory store's bytes per plant: RSS over N plants, the change feed's events kept.

    python -m bench plant-bytes                   # 300,000 plants, events kept (100,000, the default)
    python -m bench plant-bytes --plants 1000000 --lines 12
    python -m bench plant-bytes --smoke

In this process, no server: the store is filled as the service's creates fill it, with the
plants of bench/harness's create.lua (a unique id, a 17-character name, one of five tags, each
a new str as a request's JSON makes it) and a request id (32 hex digits) as each event's origin.
The figure is the process's RSS after the plants less before, per plant: the store's dicts,
sorted lists and objects, and the feed's ring at PLANTS_EVENTS_RETAIN events. `--lines N` runs
again under tracemalloc (which doubles the RSS, so a second run) and lists the N source lines
that hold the most, per plant.
"""

from __future__ import annotations

import gc
import random
import tracemalloc

from app.store.memory.store import MemoryPlantStore
from bench.harness.report import benchmark_parser, finish

NAMES = ("Boston fern", "Aloe vera", "Snake plant", "Golden pothos", "Peace lily", "Spider plant")
TAGS = ("fern", "succulent", "tropical", "vine", "flowering")


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def fill(plants: int, retain: int) -> MemoryPlantStore:
    store = MemoryPlantStore(2 * plants, retain)
    for n in range(plants):
        name = f"{NAMES[n % len(NAMES)]} {n % 100000:05d}"
        tag = "".join(TAGS[n % len(TAGS)])  # a str of its own, as json.loads makes it
        store.create(10**13 + n, name, tag, origin=f"{random.getrandbits(128):032x}")
    gc.collect()
    return store


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--plants", type=int, help="default 300,000 (smoke 5,000)")
    parser.add_argument("--retain", type=int, default=100_000, help="events kept (PLANTS_EVENTS_RETAIN)")
    parser.add_argument("--lines", type=int, default=0, help="the N lines holding the most (tracemalloc)")
    args = parser.parse_args()
    plants = args.plants or (5_000 if args.smoke else 300_000)
    results: dict = {"plants": plants, "retain": args.retain}
    before = _rss()
    store = fill(plants, args.retain)
    results["bytes_per_plant"] = (_rss() - before) / plants
    del store
    gc.collect()
    results["lines"] = []
    if args.lines:
        tracemalloc.start()
        kept = fill(plants, args.retain)
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        del kept
        for stat in snapshot.statistics("lineno")[: args.lines]:
            results["lines"].append({"line": str(stat.traceback), "bytes_per_plant": stat.size / plants})
    return finish(results, [], report, args.json)


def report(results: dict) -> str:
    lines = [
        f"Memory store, {results['plants']:,} plants, {results['retain']:,} events kept:",
        f"RSS {results['bytes_per_plant']:.1f} bytes per plant",
    ]
    lines += [f"  {line['bytes_per_plant']:7.1f}  {line['line']}" for line in results["lines"]]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
