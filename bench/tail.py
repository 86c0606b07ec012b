"""Where the tail comes from: the tail under open-loop load per lever, side by side, with probes.

    python bench/tail.py --levers first --shares 0.6 --rounds 3 --seconds 10   # bench/README.md, first table
    python bench/tail.py --shares 0.4,0.6 --rounds 3 --seconds 10              # bench/README.md, second table
    python bench/tail.py --closed-loop --variants 0,1 --rounds 5 --seconds 10  # a lever's throughput cost
    python bench/tail.py --closed-loop --variants 0,1 --rounds 5 --seconds 8 --connections 64

One worker on the memory store per variant (bench/tail_conf.py), each offered the same open-loop
rates (shares of the first variant's closed-loop maximum; k6 as in bench/latency.py) in
interleaved rounds. The first set is what was measured before any lever: no lever, gc.freeze(),
a 0.5 ms GIL switch interval, one request thread, the GC disabled. The second starts from the
configuration packaged before the thread lever (gc.freeze(), 2 threads) and adds one lever at a
time, beside three bounds: a bare Flask route (bench/floor.py), the worker alone with no Flask
(bench/raw_wsgi.py), and the FastAPI peer. For each it reports the percentiles, the longest
gen-0 and gen-2 collection, and how long a connection's turn in a request thread took (p50,
p99): the part of the latency spent inside the worker's thread, queueing for the GIL included.
With --closed-loop it measures each variant's closed-loop throughput instead (wrk, interleaved
rounds), as a ratio to the first one's.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import PERCENTILES, k6
from bench.run import ROOT, Server, benchmark_parser, show_spread, spread, wrk

# Both sets were measured when the worker ran 2 request threads, the default then; the memory
# store's default is now 1 (the second set's lever), so they ask for 2 where they measured 2.
TWO = {"LEVER_THREADS": "2"}
NO_FREEZE = {**TWO, "LEVER_NO_FREEZE": "1"}
FIRST = {  # name: (environment, the WSGI app when not the service's)
    "no lever": (NO_FREEZE, None),
    "gc.freeze()": (TWO, None),
    "switch interval 0.5 ms": ({**NO_FREEZE, "LEVER_SWITCH": "0.0005"}, None),
    "1 request thread (not 2)": ({**NO_FREEZE, "LEVER_THREADS": "1"}, None),
    "GC disabled (a bound, not a lever)": ({**NO_FREEZE, "LEVER_GC_DISABLE": "1"}, None),
}
SECOND = {
    "gc.freeze(), 2 threads (packaged before the thread lever)": (TWO, None),
    "+ 1 request thread (packaged now)": ({"LEVER_THREADS": "1"}, None),
    "+ gen-0 threshold 7,000 (not 700)": ({**TWO, "LEVER_GEN0": "7000"}, None),
    "+ switch interval 1 ms": ({**TWO, "LEVER_SWITCH": "0.001"}, None),
    "bound: bare Flask route, same worker": (TWO, "bench.floor:app"),
    "bound: the worker alone, no Flask": (TWO, "bench.raw_wsgi:app"),
}
PEER = "FastAPI peer (uvicorn)"


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--levers", choices=("first", "second"), default="second")
    parser.add_argument("--shares", default="0.6", help="comma-separated shares of the maximum")
    parser.add_argument("--variants", help="comma-separated numbers of the variants to run, from 0")
    parser.add_argument("--closed-loop", action="store_true", help="throughput per variant instead")
    parser.add_argument("--connections", type=int, default=8, help="wrk's connections (--closed-loop)")
    args = parser.parse_args()
    rounds, seconds = args.rounds or (1 if args.smoke else 3), args.seconds or (3 if args.smoke else 10)
    shares = [float(share) for share in args.shares.split(",")]
    directory = Path(tempfile.mkdtemp(prefix="bench-tail-"))
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "bench" / "tail_conf.py")]
    common = {"PLANTS_MAX_PLANTS": str(10**9)}
    variants = FIRST if args.levers == "first" else SECOND
    if args.variants:
        chosen = {int(number) for number in args.variants.split(",")}
        variants = {name: value for number, (name, value) in enumerate(variants.items()) if number in chosen}
    servers = {
        name: Server(name, [*gunicorn, *([app] if app else [])],
                     {**common, "TAIL_PROBE_DIR": str(directory), "TAIL_PROBE_NAME": str(number), **env})
        for number, (name, (env, app)) in enumerate(variants.items())
    }  # fmt: skip
    if args.levers == "second" and not args.variants:
        uvicorn = ["--workers", "1", "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]
        peer = [sys.executable, "-m", "uvicorn", "bench.fastapi_peer:app", *uvicorn]
        servers[PEER] = Server(PEER, peer, common)
    runs: dict[tuple[float, str], list[dict]] = {(share, name): [] for share in shares for name in servers}
    if args.closed_loop:
        return closed_loop(servers, rounds, seconds, args.connections)
    try:
        for server in servers.values():
            server.start()
        first = next(iter(servers.values()))
        maximum = wrk(first, "create.lua", 5, 8, {"BENCH_ID_BASE": str(10**12)})["rps"]
        id_base = 10**12
        for _ in range(rounds):
            for share in shares:
                for name, server in servers.items():
                    id_base += 10**12
                    runs[share, name].append(k6(server, round(share * maximum), seconds, id_base, directory))
    finally:
        for server in servers.values():
            server.stop()
    probes = {}
    for number, name in enumerate(variants):
        found = [json.loads(path.read_text()) for path in directory.glob(f"{number}-*.json")]
        probes[name] = found[0] if found else {}
    print(f"Open loop, {rounds} rounds of {seconds:g} s; the first variant's closed-loop maximum "
          f"{maximum:,.0f}/s. Latency: medians of the rounds (min to max). Probes: per worker, "
          "over all its runs.\n")  # fmt: skip
    print("| variant @ share | rate | p50 (ms) | p90 (ms) | p99 (ms) | p99.9 (ms) | dropped "
          "| longest gen 0, gen 2 (ms) | thread turn p50, p99 (ms) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (share, name), name_runs in runs.items():
        cells = " | ".join(show_spread(spread(name_runs, key)) for key in PERCENTILES)
        probe = probes.get(name, {})
        gens = ", ".join(f"{probe[g]['max_ms']:.1f}" if g in probe else "none" for g in ("0", "2"))
        turn = f"{probe['turn']['p50']:.2f}, {probe['turn']['p99']:.2f}" if "turn" in probe else "n/a"
        dropped = sum(r["dropped"] for r in name_runs)
        print(f"| {name} @ {share:.0%} | {name_runs[0]['rate']:,} | {cells} | {dropped} "
              f"| {gens if probe else 'n/a'} | {turn} |")  # fmt: skip
    return 0


def closed_loop(servers: dict[str, Server], rounds: int, seconds: float, connections: int) -> int:
    """Each variant's closed-loop throughput in interleaved rounds, the order reversed every other
    round; medians and ratios."""
    runs: dict[str, list[dict]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            server.start()
        id_base = 10**12
        for number in range(rounds):
            order = list(servers.items())
            for name, server in order if number % 2 == 0 else reversed(order):
                id_base += 10**12
                runs[name].append(
                    wrk(server, "create.lua", seconds, connections, {"BENCH_ID_BASE": str(id_base)})
                )
    finally:
        for server in servers.values():
            server.stop()
    found = {name: spread(name_runs, "rps") for name, name_runs in runs.items()}
    first = next(iter(found.values()))["median"]
    print(f"Closed loop (wrk -c{connections}), {rounds} interleaved rounds of {seconds:g} s; "
          "medians (min to max).\n")  # fmt: skip
    print("| variant | creates/s | / the first |\n|---|---:|---:|")
    for name, rps in found.items():
        print(f"| {name} | {show_spread(rps, ',.0f')} | {rps['median'] / first:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
