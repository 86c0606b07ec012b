"""Benchmark: the service as deployed against the floor and the FastAPI peer, in one run.

    python bench/run.py            # full run (about 15 minutes: includes preloading 1,000,000 plants)
    python bench/run.py --smoke    # about a second per contestant; what CI runs

Servers are pinned to CPU 0 and wrk to CPU 1 (taskset). Contestants run interleaved
(A B C, A B C, ...) and the medians are reported, with ratios measured in this one run.
A run in which any create is not 2xx (or any refusal has another status) is invalid: it says
so and exits 1. Results go to stdout as Markdown and to --json as data.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "bench" / "lua"
TOKEN = "bench-token"
SERVER_CPU, CLIENT_CPU = "0", "1"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    #: Where it runs, and so which tree gunicorn imports the app from (it puts its cwd first).
    cwd: Path = ROOT

    def start(self) -> Server:
        env = {
            **os.environ,
            "PLANTS_API_TOKENS": TOKEN,
            "GUNICORN_BIND": f"127.0.0.1:{self.port}",
            "PYTHONPATH": str(self.cwd),
            **self.env,
        }
        argv = [arg.replace("{port}", str(self.port)) for arg in self.argv]
        self.process = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, *argv],
            cwd=self.cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("POST", "/plants", body="{}", headers={"Content-Type": "application/json"})
                conn.getresponse().read()
                return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited: {self.process.stderr.read().decode()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start")

    def pids(self) -> list[int]:
        """The server's processes: the master and its workers (gunicorn) or the one process (uvicorn)."""
        pids = [self.process.pid]
        for pid in list(pids):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            pids += [int(child) for child in children]
        return pids

    def cpu_seconds(self) -> float:
        total = 0
        for pid in self.pids():
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
        return total / TICK

    def worker_rss_bytes(self) -> int:
        pid = self.pids()[-1]  # gunicorn: the worker; uvicorn: the process itself
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def wrk(server: Server, script: str, seconds: float, connections: int, env: dict[str, str]) -> dict:
    """One wrk run against `server`; its numbers, plus the server CPU time it cost."""
    cpu_before = server.cpu_seconds()
    argv = [
        "taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{connections}", f"-d{max(seconds, 1):.0f}s",
        "--latency", "-s", str(LUA / script), f"http://127.0.0.1:{server.port}/plants",
    ]  # fmt: skip
    result = subprocess.run(
        argv, env={**os.environ, "BENCH_TOKEN": TOKEN, **env}, capture_output=True, text=True, check=True,
        timeout=seconds + 3600,
    )  # fmt: skip
    line = next(line for line in result.stdout.splitlines() if line.startswith("BENCH "))
    stats = json.loads(line[len("BENCH ") :])
    stats["cpu_us_per_request"] = (server.cpu_seconds() - cpu_before) * 1e6 / max(stats["requests"], 1)
    stats["rps"] = stats["requests"] / (stats["duration_us"] / 1e6)
    stats["socket_errors"] = stats["connect"] + stats["read"] + stats["write"] + stats["timeout"]
    return stats


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def spread(runs: list[dict], key: str) -> dict[str, float]:
    """The median of the rounds' `key`, with its spread: the lowest and the highest."""
    values = [run[key] for run in runs]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def show_spread(found: dict[str, float], spec: str = ".1f") -> str:
    """`median (min to max)`, each formatted with `spec`."""
    return f"{found['median']:{spec}} ({found['min']:{spec}} to {found['max']:{spec}})"


def versions() -> str:
    names = ["flask", "werkzeug", "marshmallow", "gunicorn", "gunicorn_h1c", "orjson", "fastapi", "pydantic",
             "uvicorn", "uvloop", "httptools"]  # fmt: skip
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (absent)")
    return ", ".join(found)


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark script's arguments: its docstring as help, and the options every one has."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a second or a few per contestant (CI's mode)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; smoke 1)")
    parser.add_argument("--seconds", type=float, help="seconds per measured run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--plants", type=int, help="plants preloaded for the memory and p99 figures "
                        "(default 1,000,000; smoke 5,000)")  # fmt: skip
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (1 if args.smoke else 10)
    plants = args.plants or (5_000 if args.smoke else 1_000_000)
    python = sys.executable
    gunicorn = [python, "-m", "gunicorn", "-c", "gunicorn.conf.py"]
    contestants = {
        "service": Server("service", [*gunicorn, "wsgi:app"]),
        "floor": Server("floor", [*gunicorn, "bench.floor:app"]),
        "peer": Server("peer", [python, "-m", "uvicorn", "bench.fastapi_peer:app", "--workers", "1",
                                "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]),
    }  # fmt: skip
    # Room for the preload and the measured creates after it (the default capacity is 1,000,000).
    loaded = Server(
        "service, store preloaded", [*gunicorn, "wsgi:app"], {"PLANTS_MAX_PLANTS": str(2 * plants + 10**6)}
    )
    servers = [*contestants.values(), loaded]
    problems: list[str] = []
    results: dict = {"mode": "smoke" if args.smoke else "full", "rounds": rounds, "seconds": seconds,
                     "connections": args.connections, "plants": plants}  # fmt: skip
    try:
        for server in servers:
            server.start()
        id_base = 0

        def create_run(server: Server, run_seconds: float = seconds) -> dict:
            nonlocal id_base
            id_base += 10**13
            return wrk(server, "create.lua", run_seconds, args.connections, {"BENCH_ID_BASE": str(id_base)})

        # Memory: RSS of the preloaded service's worker before and after `plants` creates.
        rss_before = loaded.worker_rss_bytes()
        stored = chunks = 0
        while stored < plants:
            chunks += 1
            # wrk runs for all of -d even once every thread has stopped: short runs, each
            # capped at what is left, bound the idle time.
            chunk = wrk(loaded, "create.lua", 5, args.connections, {
                "BENCH_LIMIT": str(plants - stored), "BENCH_ID_BASE": str(chunks * 10**9)
            })  # fmt: skip
            if chunk["non2xx"] or chunk["socket_errors"] or not chunk["requests"]:
                problems.append(f"preload: {chunk}")
                break
            stored += chunk["requests"]
        results["bytes_per_plant"] = (loaded.worker_rss_bytes() - rss_before) / max(stored, 1)

        for server in [*contestants.values(), loaded]:  # warm up
            create_run(server, 1)
        runs: dict[str, list[dict]] = {
            name: [] for name in [*contestants, "loaded", "refused_401", "refused_400"]
        }
        for _ in range(rounds):
            for name, server in contestants.items():
                runs[name].append(create_run(server))
            runs["loaded"].append(create_run(loaded))
            for case in ("401", "400"):
                runs[f"refused_{case}"].append(
                    wrk(
                        contestants["service"], "refused.lua", seconds, args.connections, {"BENCH_CASE": case}
                    )
                )
        for name, name_runs in runs.items():
            for run in name_runs:
                if run.get("non2xx") or run.get("unexpected") or run["socket_errors"]:
                    problems.append(f"{name}: {run}")
            results[name] = {
                key: median_of(name_runs, key) for key in ("rps", "p50_us", "p99_us", "cpu_us_per_request")
            }
            results[name]["runs"] = name_runs
    finally:
        for server in servers:
            server.stop()

    service, floor, peer, loaded_result = (
        results["service"],
        results["floor"],
        results["peer"],
        results["loaded"],
    )
    results["ratios"] = {
        "service_to_floor_rps": service["rps"] / floor["rps"],
        "service_to_peer_rps": service["rps"] / peer["rps"],
        "service_to_peer_p99": service["p99_us"] / peer["p99_us"],
        "loaded_to_empty_p99": loaded_result["p99_us"] / service["p99_us"],
        "refused_401_to_create_rps": results["refused_401"]["rps"] / service["rps"],
        "refused_400_to_create_rps": results["refused_400"]["rps"] / service["rps"],
    }
    results["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, " + (
        f"Python {platform.python_version()}"
    )
    return finish(results, problems, report, args.json)


def finish(results: dict, problems: list[str], report: Callable[[dict], str], json_path: Path | None) -> int:
    """Record versions and validity, print the report, write the JSON; the exit status."""
    results["versions"] = versions()
    results["valid"] = not problems
    results["problems"] = problems
    print(report(results))
    if json_path:
        json_path.write_text(json.dumps(results, indent=2))
    return 0 if not problems else 1


def validity(results: dict, valid: str = "VALID: every create was 2xx.") -> str:
    """The report's last line: what made the run valid, or every problem that made it not."""
    return valid if results["valid"] else "INVALID RUN:\n" + "\n".join(results["problems"])


def report(results: dict) -> str:
    rows = [
        ("service (create)", results["service"]),
        ("floor (bare Flask route)", results["floor"]),
        ("FastAPI peer (create)", results["peer"]),
        (f"service, {results['plants']:,} plants stored", results["loaded"]),
        ("service, refused 401", results["refused_401"]),
        ("service, refused 400", results["refused_400"]),
    ]
    ratios = results["ratios"]
    lines = [
        f"Machine: {results['machine']}",
        f"Versions: {results['versions']}",
        f"Mode: {results['mode']}; {results['rounds']} interleaved rounds of {results['seconds']:g} s, "
        f"wrk -t1 -c{results['connections']}; server on CPU {SERVER_CPU}, wrk on CPU {CLIENT_CPU}; medians.",
        "",
        "| contestant | req/s | p50 | p99 | server CPU / request |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {r['rps']:,.0f} | {r['p50_us'] / 1000:.2f} ms | {r['p99_us'] / 1000:.2f} ms "
            f"| {r['cpu_us_per_request']:.0f} µs |"
            for name, r in rows
        ),
        "",
        "| ratio | value |",
        "|---|---:|",
        f"| create throughput / floor | {ratios['service_to_floor_rps']:.2f} |",
        f"| create throughput / FastAPI peer | {ratios['service_to_peer_rps']:.2f} |",
        f"| create p99 / FastAPI peer p99 | {ratios['service_to_peer_p99']:.2f} |",
        f"| p99 with {results['plants']:,} plants / p99 near-empty | {ratios['loaded_to_empty_p99']:.2f} |",
        f"| refused 401 throughput / create | {ratios['refused_401_to_create_rps']:.2f} |",
        f"| refused 400 throughput / create | {ratios['refused_400_to_create_rps']:.2f} |",
        f"| bytes per stored plant (RSS delta / {results['plants']:,}) | {results['bytes_per_plant']:.0f} |",
        "",
        "VALID: every create was 2xx and every refusal had its status."
        if results["valid"]
        else "INVALID RUN:\n" + "\n".join(results["problems"]),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
