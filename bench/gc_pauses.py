"""Where the tail comes from: GC pauses and the tail under open-loop load, per lever, side by side.

    python bench/gc_pauses.py --rounds 3 --seconds 10      # the run in bench/README.md

One worker on the memory store per variant (bench/gc_pauses_conf.py), each offered the same
open-loop rate (60% of the first variant's closed-loop maximum; k6 as in bench/latency.py) in
interleaved rounds: no lever (the GC as Python sets it), the packaged gc.freeze(), a 0.5 ms GIL
switch interval, one request thread, and the GC disabled (a bound, not a lever). It reports each
variant's percentiles and, per generation, how many collections ran and the longest.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import PERCENTILES, k6
from bench.run import ROOT, Server, benchmark_parser, wrk

VARIANTS = {
    "no lever": {},
    "gc.freeze() (packaged)": {"GC_LEVER_FREEZE": "1"},
    "switch interval 0.5 ms": {"GC_LEVER_SWITCH": "0.0005"},
    "1 request thread": {"GC_LEVER_THREADS": "1"},
    "GC disabled (a bound)": {"GC_LEVER_DISABLE": "1"},
}


def main() -> int:
    args = benchmark_parser(__doc__).parse_args()
    rounds, seconds = args.rounds or (1 if args.smoke else 3), args.seconds or (3 if args.smoke else 10)
    directory = Path(tempfile.mkdtemp(prefix="bench-gc-"))
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "bench" / "gc_pauses_conf.py")]
    servers = {
        name: Server(name, gunicorn, {"PLANTS_MAX_PLANTS": str(10**9), "GC_PAUSES_DIR": str(directory),
                                      "GC_PAUSES_NAME": str(number), **env})
        for number, (name, env) in enumerate(VARIANTS.items())
    }  # fmt: skip
    runs: dict[str, list[dict]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            server.start()
        first = next(iter(servers.values()))
        rate = round(0.6 * wrk(first, "create.lua", 5, 8, {"BENCH_ID_BASE": str(10**12)})["rps"])
        id_base = 10**12
        for _ in range(rounds):
            for name, server in servers.items():
                id_base += 10**12
                runs[name].append(k6(server, rate, seconds, id_base, directory))
    finally:
        for server in servers.values():
            server.stop()
    print(f"Open loop at {rate}/s (60% of the first variant's closed-loop maximum), {rounds} rounds of "
          f"{seconds:g} s; medians (min to max); GC collections per worker over all rounds.\n")  # fmt: skip
    header = "| variant | p50 (ms) | p90 (ms) | p99 (ms) | p99.9 (ms) | dropped"
    print(header + " | gen 0: n, longest | gen 2: n, longest |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for number, (name, name_runs) in enumerate(runs.items()):
        cells = " | ".join(
            f"{statistics.median(r[key] for r in name_runs):.1f} "
            f"({min(r[key] for r in name_runs):.1f} to {max(r[key] for r in name_runs):.1f})"
            for key in PERCENTILES
        )
        (pauses,) = [json.loads(path.read_text()) for path in directory.glob(f"{number}-*.json")] or [{}]
        gens = " | ".join(
            f"{pauses[g]['n']}, {pauses[g]['max_ms']:.1f} ms" if g in pauses else "none" for g in ("0", "2")
        )
        print(f"| {name} | {cells} | {sum(r['dropped'] for r in name_runs)} | {gens} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
