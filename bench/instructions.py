"""Instructions per request, in process: a figure that machine noise does not move.

    python -m bench instructions                 # every path below, under valgrind
    python -m bench instructions create 400      # some of them
    python -m bench instructions --budget        # the paths of bench/instruction-budget.json, against it
    python -m bench instructions --budget put    # one of them, against it
    python -m bench instructions --smoke         # the create, 100 requests counted

Each path runs once under `valgrind --tool=callgrind` (Debian: `apt-get install valgrind`):
300 requests through the WSGI app without a server to warm it up, then 1,000 more, counted on
their own (callgrind dumps its counts when the process calls `os.getppid()`, once before them
and once after). Their count divided by 1,000 is the app's instructions per request, without
start-up, warm-up or exit. The same code gives the same count on a busy machine, so a lever of
2% can be seen, where wrk's req/s swing by ±10%. It counts the app only: the server's share is
measured by `python -m bench floor`.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from bench.harness import BENCH, ROOT, TOKEN
from bench.harness.report import benchmark_parser, save

#: Each path: which app, the request body, the token, and the status every response must have.
#: `get` and `page` are GETs (of a plant, of the first page of 100) of a store preloaded with
#: PRELOAD plants in every run, so that the preload cancels out of the difference.
#: `304` is a GET of a plant with its current ETag in If-None-Match; `put` replaces a preloaded
#: plant, its name changing every time. `create-hooked` is a create with HOOKED webhook endpoints
#: registered (deliveries are not started: they run apart from the request path, in the worker's
#: own thread, and this counts the request path). `create-cors` is a create from a page on an
#: allowed origin (PLANTS_CORS_ORIGINS set, an Origin header sent): against `create`, what CORS costs.
PATHS = {
    "floor": ("floor", None, TOKEN, 200),
    "create": ("service", None, TOKEN, 200),
    "create-hooked": ("service", None, TOKEN, 200),
    "create-cors": ("service", None, TOKEN, 200),
    "400": ("service", b'{"id": "1", "name": 5, "tags": "x"}', TOKEN, 400),
    "401": ("service", b'{"id": 1, "name": "Boston fern"}', "wrong-token", 401),
    "get": ("service", b"", TOKEN, 200),
    "304": ("service", b"", TOKEN, 304),
    "put": ("service", None, TOKEN, 200),
    "page": ("service", b"", TOKEN, 200),
}
WARMUP, MEASURED = 300, 1000
#: The C function of `os.getppid`, before which callgrind dumps its counts: the window's marker.
MARKER = "os_getppid"
PRELOAD = 2000
HOOKED = 10
CORS_ORIGIN = "https://app.example"


def environ(body: bytes, token: str, method: str = "POST", path: str = "/plants", query: str = "") -> dict:
    return {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "50000", "RAW_URI": f"{path}?{query}" if query else path,
        "CONTENT_TYPE": "application/json" if body else "", "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_HOST": "127.0.0.1:8000",
        "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False, "wsgi.version": (1, 0),
    }  # fmt: skip


def bodies(fixed: bytes | None) -> Iterable[bytes]:
    """The fixed body, or valid creates with a new id each, as bench/lua/create.lua sends."""
    number = 0
    while True:
        number += 1
        yield fixed or b'{"id": %d, "name": "Snake plant %05d", "tag": "vine"}' % (number, number % 100_000)


def serve(path: str, count: int) -> None:
    """Send WARMUP requests of `path` through the app in this process, then `count` more between
    two calls of the MARKER; check every status."""
    which, fixed, token, expected = PATHS[path]
    os.environ["PLANTS_API_TOKENS"] = TOKEN
    if which == "floor":
        from bench.apps.floor import app
    else:
        from app import create_app

        settings = {"PLANTS_MAX_PLANTS": 10**7, "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1"}
        if path == "create-cors":
            settings["PLANTS_CORS_ORIGINS"] = CORS_ORIGIN
        app = create_app(settings)
        if path == "create-hooked":
            register_endpoints(app, HOOKED)
    statuses: list[str] = []

    def start_response(status: str, headers: list, exc_info: object = None) -> Callable:
        statuses.append(status)
        return lambda data: None

    if path in ("get", "304", "put", "page"):
        store = app.extensions["plants"].store
        for number in range(PRELOAD):
            store.create(number, f"Snake plant {number:05d}", "vine")
        requests = [request_of(path, number % PRELOAD, token) for number in range(WARMUP + count)]
    else:
        requests = [environ(body, token) for body in itertools.islice(bodies(fixed), WARMUP + count)]
    if path == "create-cors":
        for request in requests:
            request["HTTP_ORIGIN"] = CORS_ORIGIN
    for number, env in enumerate(requests):
        if number == WARMUP:
            os.getppid()
        response = app(env, start_response)
        b"".join(response)
        response.close()
    os.getppid()
    wrong = [status for status in statuses if not status.startswith(str(expected))]
    if wrong:
        raise SystemExit(f"{path}: {len(wrong)} responses were not {expected}, e.g. {wrong[0]}")


def register_endpoints(app: object, count: int) -> None:
    """`count` webhook endpoints, registered through the API as a user would."""
    client = app.test_client()  # type: ignore[attr-defined]
    for number in range(count):
        url = f"http://127.0.0.1:{9000 + number}/hook"
        response = client.post("/webhooks", json={"url": url}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 201, response.get_data()
    app.extensions["plants"].deliverer.stop()  # type: ignore[attr-defined]


def request_of(path: str, number: int, token: str) -> dict:
    """The environ of a request of `path` that reads or changes the preloaded plant `number`."""
    if path == "page":
        return environ(b"", token, "GET", "/plants", "limit=100")
    if path == "put":
        body = b'{"name": "Renamed %05d", "tag": "vine"}' % number
        return environ(body, token, "PUT", f"/plants/{number}")
    request = environ(b"", token, "GET", f"/plants/{number}")
    if path == "304":
        from app.store import plant_etag

        request["HTTP_IF_NONE_MATCH"] = f'"{plant_etag(f"Snake plant {number:05d}", "vine")}"'
    return request


def instructions(path: str, count: int) -> int:
    """The instructions of `count` requests of `path`, after the warm-up: the second of the
    dumps the MARKER makes (the first holds start-up and warm-up)."""
    with tempfile.TemporaryDirectory(prefix="plants-callgrind-") as directory:
        out = Path(directory) / "callgrind.out"
        result = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", f"--dump-before={MARKER}",
             sys.executable, "-m", "bench.instructions", "--serve", path, str(count)],
            capture_output=True, text=True, check=False, cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        if result.returncode != 0:
            raise SystemExit(f"{path}: the requests under valgrind failed: {result.stderr[-2000:]}")
        window = out.with_name(f"{out.name}.2")
        if not window.exists():
            raise SystemExit(
                f"callgrind made no dump at {MARKER}: this Python's symbols are not visible to it"
            )
        match = re.search(r"^(?:summary|totals): (\d+)", window.read_text(), re.MULTILINE)
    if not match:
        raise SystemExit(f"no instruction count in callgrind's dump {window.name}")
    return int(match.group(1))


#: The committed budget of instructions per request (CONTRIBUTING.md says when it moves).
BUDGET = BENCH / "instruction-budget.json"
#: How far over its budget a path may count before the budget check fails.
TOLERANCE = 0.03


def per_request(path: str, count: int = MEASURED) -> int:
    """The app's instructions per request of `path`: start-up, warm-up and exit left out."""
    return round(instructions(path, count) / count)


def over_budget(counts: dict[str, int], budget: dict[str, int]) -> list[str]:
    """Each path whose count passes its budget by more than TOLERANCE, said in one line."""
    return [
        f"{path}: {count:,} instructions per request, {count / budget[path] - 1:+.1%} against the budget"
        f" of {budget[path]:,} (at most {TOLERANCE:.0%} over)"
        for path, count in counts.items()
        if count > budget[path] * (1 + TOLERANCE)
    ]


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("paths", nargs="*", help=f"any of {', '.join(PATHS)} (default: all)")
    parser.add_argument("--serve", nargs=2, metavar=("PATH", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--budget", action="store_true", help=f"count the paths of {BUDGET.name} (or those given), against it"
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    unknown = set(args.paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown paths: {', '.join(sorted(unknown))}")
    count = 100 if args.smoke else MEASURED
    if args.budget:
        budget = json.loads(BUDGET.read_text())
        unbudgeted = set(args.paths) - set(budget)
        if unbudgeted:
            parser.error(f"no budget for: {', '.join(sorted(unbudgeted))}")
        counts = {path: per_request(path, count) for path in args.paths or budget}
        print("| path | instructions per request | budget | ratio |\n|---|---:|---:|---:|")
        for path, found in counts.items():
            print(f"| {path} | {found:,} | {budget[path]:,} | {found / budget[path]:.3f} |")
        problems = over_budget(counts, budget)
        print("\n".join(problems) or "Every path is within its budget.")
        save(counts, "instructions", args.json)
        return 1 if problems else 0
    counts = {}
    print("| path | instructions per request |\n|---|---:|")
    for path in args.paths or (["create"] if args.smoke else PATHS):
        counts[path] = per_request(path, count)
        print(f"| {path} | {counts[path]:,} |", flush=True)
    save(counts, "instructions", args.json)
    return 0


if __name__ == "__main__":  # the process valgrind counts (--serve), started as `-m bench.instructions`
    sys.exit(main())
