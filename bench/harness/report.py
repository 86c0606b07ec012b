"""Every benchmark's command line and results: one parser with the same options everywhere, the
medians of interleaved rounds, and the JSON written to bench/results/ (ignored by git).

`statistics` and `importlib.metadata` are imported where they are used: the process whose
instructions `instructions` counts imports this module, and their objects would move its count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import BENCH

RESULTS = BENCH / "results"


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's arguments: its docstring as help, and the options every one has."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--smoke", action="store_true", help="a second or a few per contestant (the tests' mode)"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds")
    parser.add_argument("--seconds", type=float, help="seconds per measured run")
    parser.add_argument(
        "--json", type=Path, help="write the results here (default: bench/results/NAME-TIME.json)"
    )
    return parser


def median_of(runs: list[dict], key: str) -> float:
    import statistics

    return statistics.median(run[key] for run in runs)


def spread(runs: list[dict], key: str) -> dict[str, float]:
    """The median of the rounds' `key`, with its spread: the lowest and the highest."""
    import statistics

    values = [run[key] for run in runs]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def show_spread(found: dict[str, float], spec: str = ".1f") -> str:
    """`median (min to max)`, each formatted with `spec`."""
    return f"{found['median']:{spec}} ({found['min']:{spec}} to {found['max']:{spec}})"


def versions() -> str:
    from importlib import metadata

    names = ["flask", "werkzeug", "marshmallow", "gunicorn", "orjson", "redis", "fastapi", "pydantic",
             "uvicorn", "uvloop", "httptools"]  # fmt: skip
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (absent)")
    return ", ".join(found)


def save(results: object, name: str, json_path: Path | None) -> Path:
    """Write `results` as JSON to `json_path`, or to bench/results/NAME-TIME.json."""
    if json_path is None:
        RESULTS.mkdir(exist_ok=True)
        json_path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    json_path.write_text(json.dumps(results, indent=2))
    return json_path


def finish(results: dict, problems: list[str], report: Callable[[dict], str], json_path: Path | None) -> int:
    """Record versions and validity, print the report, write the JSON; the exit status. The JSON's
    default name is the benchmark's, the module that holds `report`."""
    results["versions"] = versions()
    results["valid"] = not problems
    results["problems"] = problems
    print(report(results))
    written = save(results, report.__module__.rsplit(".", 1)[-1], json_path)
    print(f"\nResults: {written}", file=sys.stderr)
    return 0 if not problems else 1


def validity(results: dict, valid: str = "VALID: every create was 2xx.") -> str:
    """The report's last line: what made the run valid, or every problem that made it not."""
    return valid if results["valid"] else "INVALID RUN:\n" + "\n".join(results["problems"])


#: What a run beside redis-server reports: req/s and the CPU per request of each side.
SIDE_BY_SIDE = ("rps", "cpu_us_per_request", "redis_cpu_us_per_request")


def side_by_side_table(results: dict) -> list[str]:
    """A table of each workload of `results` measured with SIDE_BY_SIDE: median (min to max)."""
    return [
        "| workload | req/s | worker CPU / request (µs) | redis-server CPU / request (µs) |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | " + " | ".join(show_spread(found[key]) for key in SIDE_BY_SIDE) + " |"
            for name, found in results.items()
            if isinstance(found, dict) and "rps" in found
        ),
    ]
