"""The memory store's growth pauses: the longest single creates while it fills, in process.

    python bench/store_growth.py                      # 2 rounds of 2,000,000 creates per variant
    python bench/store_growth.py --plants 1000000 --rounds 3

A Python dict that outgrows its table is copied whole, and the store does that under its lock and
the GIL: every request waits. Each variant fills a fresh store in its own process, pinned to
CPU 0, with the benchmark's names and tags and ids spread as clients send them, and reports the
longest creates (with the store's size at each), the creates over 5 ms, the full GC collections
(how many, the longest) and the RSS per plant.
Variants: the store as shipped (its dicts spread over SHARDS by id) and one dict pair, which was
the store before (`SHARDS = 1`), interleaved.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gc_probe import CollectionTimer
from bench.run import SERVER_CPU, benchmark_parser

TAGS = ("fern", "succulent", "tropical", "vine", "flowering")


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def fill(shards: int, plants: int) -> dict:
    """In this process: fill a store of `shards` dict pairs; the slow creates and the RSS."""
    import gc

    from app.store.memory import store as memory

    memory.SHARDS = shards
    gc.freeze()  # as the worker does after loading the app
    collections = CollectionTimer().install()
    store = memory.MemoryPlantStore(10**9)
    before = rss_bytes()
    clock = time.perf_counter
    slow: list[tuple[float, int]] = []
    for n in range(plants):
        name = f"Boston fern {n % 100_000}"
        started = clock()
        store.create(10**12 + n * 7919, name, TAGS[n % 5])
        took = clock() - started
        if took > 0.005:
            slow.append((took * 1e3, n))
    slow.sort(reverse=True)
    full = collections.summary().get("2", {"n": 0, "max_ms": 0.0})
    return {
        "slowest": slow[:5],
        "over_5ms": len(slow),
        "bytes_per_plant": (rss_bytes() - before) / plants,
        "full_collections": full["n"],
        "longest_full_ms": full["max_ms"],
    }


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--plants", type=int, help="creates per fill (default 2,000,000; smoke 100,000)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # one fill, in its own process
    args = parser.parse_args()
    plants = args.plants or (100_000 if args.smoke else 2_000_000)
    if args.child:
        print(json.dumps(fill(args.child, plants)))
        return 0
    from app.store.memory.store import SHARDS

    variants = {f"shipped ({SHARDS} dict pairs by id)": SHARDS, "one dict pair (the store before)": 1}
    rounds = args.rounds or (1 if args.smoke else 2)
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, shards in variants.items():
            argv = ["taskset", "-c", SERVER_CPU, sys.executable, __file__, "--child", str(shards),
                    "--plants", str(plants)]  # fmt: skip
            output = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=3600).stdout
            results[name].append(json.loads(output))
    print(f"{plants:,} creates per fill, {rounds} fills per variant, interleaved, on CPU {SERVER_CPU}.\n")
    print("| variant | longest creates, ms (store size then) | creates over 5 ms "
          "| full collections: n, longest | RSS per plant |")  # fmt: skip
    print("|---|---|---:|---:|---:|")
    for name, fills in results.items():
        for found in fills:
            slowest = ", ".join(f"{ms:.1f} ({size:,})" for ms, size in found["slowest"][:3])
            gen2 = f"{found['full_collections']}, {found['longest_full_ms']:.1f} ms"
            print(f"| {name} | {slowest} | {found['over_5ms']} | {gen2} | {found['bytes_per_plant']:.0f} B |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
