"""The whole serving process, counted per request: instructions, system calls, context switches.

    python -m bench process                       # memory and Redis, every request kind
    python -m bench process --store memory create # some of them
    python -m bench process --budget              # against bench/instruction-budget.json ("process")
    python -m bench process --peer                # the creates of the FastAPI peer and the bare route too
    python -m bench process --budget --regress syscall create  # a deliberate regression: must fail

The service runs as shipped (gunicorn, the packaged configuration and worker, its access line
written, one worker), and a client on the other core sends each request kind one at a time on a
kept-alive connection (bench/harness/calls.py): create, get, page (100 plants), patch, and watch
(a long-poll woken by a create, so watch minus create is a wake-up's own cost). Per request:

- instructions: every thread of the worker process, under callgrind (a second server, started
  under valgrind without instrumentation, its worker forked again once the master has it:
  `instrumented`; dumps asked for after a warm-up and after the
  requests);
- system calls: `strace -f -c` attached to the worker (every thread), over two windows, the one
  with the fewer calls counted (the machine's other load adds GIL waits to a window, never fewer);
- context switches: every thread's, from /proc/PID/task/*/status. The voluntary ones (a thread
  waiting) are counted: the serving thread's (a client that waits for each answer makes it wait
  once a request) and the others' (a thread woken per request shows here). Preemptions are
  shown apart: the machine's other load makes them, not the request;
- CPU: the worker's user and system time from /proc (noisy on a shared machine), and with Redis,
  redis-server's own from `INFO cpu`.

Each figure has an idle window of the same server subtracted, at its rate per second, so that
what the process does by the clock (gunicorn's heartbeat, the deliverer's look every 2 s) does
not count as a request's. `perf stat -e instructions` would be cheaper than callgrind, but the
virtual machines this runs on expose no hardware counter (`<not supported>`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import BENCH, CLIENT_CPU, TOKEN
from bench.harness.calls import KINDS, Client
from bench.harness.counters import CALLGRIND, Callgrind, Switches, syscalls
from bench.harness.redis_cpu import RedisCPU
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import (
    APPS,
    GUNICORN,
    PYTHON,
    Server,
    children,
    cpu_seconds,
    peer,
    scratch,
    start_redis,
)

STORES = ("memory", "redis")
#: Requests per kind: sent first to warm the process up, then counted.
WARMUP, MEASURED = 100, 400
#: Under callgrind, whose process runs some 50 times slower.
VALGRIND_WARMUP, VALGRIND_MEASURED = 50, 100
IDLE_S = 2.0
#: Windows of MEASURED requests traced by strace for each kind: the one with the fewer calls counts.
SYSCALL_WINDOWS = 2
BUDGET = BENCH / "instruction-budget.json"
#: How far over its budget a figure may go: instructions by a share, the others by a count per
#: request (one more system call, or one thread woken, per request goes past it).
#: Instructions varied 2-3% run to run under a random hash seed (fixed now: within 0.25%), and a
#: loaded machine adds a fraction of a system call a request: 0.8 fails on one more system call a
#: request (`--regress syscall`), and 3% on 5% more instructions with 2% to spare, well past the
#: seeded runs' spread (bench/README.md, "Is 4% enough against 5% more?").
TOLERANCE = {"instructions": 0.03, "syscalls": 0.8, "switches": 0.5}
#: The deliberate regression the service is run with (`--regress`), or none.
REGRESS: str | None = None


def service(store_url: str | None, valgrind: Path | None = None, app: str = "wsgi:app") -> Server:
    """The service (or another app) under the packaged gunicorn configuration, one worker; under
    callgrind when `valgrind` names the directory of its counts. With REGRESS set, the service
    with that deliberate regression per create (bench/apps/regressed.py)."""
    env = {"WEB_CONCURRENCY": "1", "PLANTS_MAX_PLANTS": "10000000"}
    if REGRESS and app == "wsgi:app":
        app, env["BENCH_REGRESS"] = "regressed:app", REGRESS
    if store_url:
        env["PLANTS_STORE_URL"] = store_url
    # gunicorn's timeout also bounds a worker's import of the app, which under callgrind on a loaded
    # machine passed 600 s: the master killed the worker and forked another, again and again.
    timeout = "600" if valgrind is None else "1500"
    argv = [*GUNICORN, "--timeout", timeout, *(["--pythonpath", str(APPS)] if app != "wsgi:app" else []), app]
    if valgrind is None:
        return Server(f"{app} {store_url or 'memory'}", argv, env)
    argv[argv.index("gunicorn.conf.py")] = str(BENCH / "harness" / "callgrind_conf.py")
    # One hash seed for every run, as `bench instructions` has: with a random one, two processes'
    # creates differed by 2.2%; with this, two processes' windows agreed within 0.1%.
    env["PYTHONHASHSEED"] = "0"
    # Without instrumentation until `instrumented` switches it on: the master's imports were three
    # quarters of a start that took a minute and more.
    tool = [*CALLGRIND, "--instr-atstart=no", f"--callgrind-out-file={valgrind}/cg.%p"]
    # Its imports alone take minutes under callgrind, and over ten on a machine shared with other
    # callgrind runs (450 s seen at a load of 12 on 2 cores).
    return Server(f"{app} under callgrind", [*tool, *argv], env, start_s=1500)


def instrumented(server: Server) -> Server:
    """`server`, started by `service` under callgrind without instrumentation, with a worker that has
    it: callgrind_control switches it on in the master (it cannot reach a forked worker), and the
    first worker is stopped for gunicorn to fork another from the instrumented master, which
    imports the app with it on, as a worker started under callgrind always did. A server started
    with instrumentation on (the FastAPI peer under uvicorn: one process) is returned as it is."""
    if "--instr-atstart=no" not in server.argv:
        return server
    first = worker_of(server)
    switched = subprocess.run(
        ["callgrind_control", "--instr=on", str(server.pid)], capture_output=True, text=True, timeout=600
    )
    if switched.returncode or "Error" in switched.stdout + switched.stderr:
        raise RuntimeError(f"callgrind_control: {switched.stdout}{switched.stderr}")
    os.kill(first, signal.SIGTERM)
    deadline = time.monotonic() + server.start_s
    while children(server.pid) in ([], [first]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: no worker forked after {first}")
        time.sleep(0.1)
    return server.answering(deadline)


def peer_server() -> Server:
    """The FastAPI peer under uvicorn (bench/apps/fastapi_peer.py), its access line on."""
    argv = [PYTHON, "-m", "uvicorn", "bench.apps.fastapi_peer:app", "--host", "127.0.0.1", "--port", "{port}"]
    return Server("fastapi peer", argv, {})


def worker_of(server: Server) -> int:
    """The process that serves: gunicorn's one worker, or uvicorn's own process."""
    deadline = time.monotonic() + 60
    while "gunicorn" in " ".join(server.argv):
        workers = children(server.pid)
        if len(workers) == 1:
            return workers[0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: {len(workers)} workers, not 1")
        time.sleep(0.1)
    return server.pid


def counts(server: Server, kinds: tuple[str, ...], redis: RedisCPU | None) -> dict[str, dict]:
    """System calls, context switches and CPU per request of each kind, from a server not traced."""
    pid, client = worker_of(server), Client(server.port)
    try:
        idle_calls, idle_took = syscalls(pid, lambda: time.sleep(IDLE_S))
        idle_switches, idle_switches_s = Switches.over(pid, lambda: time.sleep(IDLE_S))
        if set(kinds) - {"create"}:
            client.preload()
        found = {}
        for kind in kinds:
            client.reconnect()
            client.send(kind, WARMUP)
            # The window with the fewer calls: the machine's other load adds futex calls where a
            # thread that let go of the GIL waits to take it back (Redis, two request threads),
            # in one window more than another; a request's own calls are in every window.
            windows = (
                per_request(syscalls(pid, lambda: client.send(kind, MEASURED)), idle_calls, idle_took)  # noqa: B023
                for _ in range(SYSCALL_WINDOWS)
            )
            per_call = min(windows, key=lambda counted: sum(counted.values()))
            cpu_before = cpu_seconds(pid)
            if redis is not None:
                redis.start()
            moved, took = Switches.over(pid, lambda: client.send(kind, MEASURED))  # noqa: B023
            switched = moved.minus(idle_switches, idle_switches_s, took)
            found[kind] = {
                "syscalls": round(sum(per_call.values()), 2),
                "syscalls_by_name": {name: round(n, 2) for name, n in sorted(per_call.items()) if n >= 0.05},
                "switches": round((switched.main + switched.others) / MEASURED, 2),
                "switches_other_threads": round(switched.others / MEASURED, 2),
                "preempted": round(switched.preempted / MEASURED, 2),
                "cpu_us": round((cpu_seconds(pid) - cpu_before) * 1e6 / MEASURED, 1),
            }
            if redis is not None:
                found[kind]["redis_cpu_us"] = round(redis.per_call(MEASURED)["redis_cpu_us"], 1)
        return found
    finally:
        client.close()


def per_request(
    traced: tuple[dict[str, int], float], idle: dict[str, int], idle_s: float
) -> dict[str, float]:
    """Each system call's count a request in one traced window of MEASURED requests, the idle
    window's calls taken off at its rate for the window's length."""
    calls, took = traced
    share = took / idle_s
    return {name: (n - idle.get(name, 0) * share) / MEASURED for name, n in calls.items()}


def instructions(server: Server, directory: Path, kinds: tuple[str, ...]) -> dict[str, int]:
    """Instructions per request of each kind, every thread of the worker, from a server under callgrind."""
    pid, client = worker_of(server), Client(server.port)
    client.park_s = 0.05
    meter = Callgrind(directory, pid)
    try:
        if set(kinds) - {"create"}:
            # The plants a kind reads (ids 0 to 149) and a full page, not PRELOAD's thousand: a
            # create takes some 25 ms under callgrind, and the thousand were a quarter of the run.
            client.preload(VALGRIND_WARMUP + VALGRIND_MEASURED)
        # One idle window for every kind, as `counts` has: what the process does by the clock does
        # not depend on the kind last sent, and a window a kind took 2 s of every kind's run.
        meter.window()
        time.sleep(IDLE_S)
        idle_per_s = meter.window() / IDLE_S
        found = {}
        for kind in kinds:
            client.reconnect()
            client.send(kind, VALGRIND_WARMUP)
            meter.window()
            started = time.monotonic()
            client.send(kind, VALGRIND_MEASURED)
            busy, took = meter.window(), time.monotonic() - started
            found[kind] = round((busy - idle_per_s * took) / VALGRIND_MEASURED)
        return found
    finally:
        client.close()


def measure(store: str, kinds: tuple[str, ...], with_instructions: bool) -> dict[str, dict]:
    """Every figure of each kind on `store`, from two servers: one traced by strace, one under callgrind."""
    directory = scratch(f"process-{store}")
    redis_process, redis = None, None
    url = None
    if store == "redis":
        import redis as redis_py

        redis_process, sock = start_redis(directory)
        url = f"unix://{sock}"
        redis = RedisCPU(redis_py.Redis(unix_socket_path=str(sock)), command="fcall")
    try:
        found = _run(service(url), lambda server: counts(server, kinds, redis))
        if with_instructions:
            if redis is not None:
                redis.client.flushall()
            under = service(url, valgrind=directory)
            counted = _run(under, lambda server: instructions(instrumented(server), directory, kinds))
            for kind, count in counted.items():
                found[kind]["instructions"] = count
        return found
    finally:
        if redis_process is not None:
            redis_process.terminate()
            redis_process.wait(10)


def _run(server: Server, measure: Callable[[Server], dict]) -> dict:
    try:
        server.start()  # one that never answers is stopped too, not left running
        return measure(server)
    finally:
        server.stop()


def peers(with_instructions: bool) -> dict[str, dict]:
    """The create of the FastAPI peers (bare, and the contract's) and of the bare Flask route,
    counted alike."""
    found = {}
    for name, make in (
        ("fastapi-peer", peer_server),
        ("fastapi-contract-peer", lambda: peer("contract peer", False, contract=True, access_log=True)),
        ("floor", lambda: service(None, app="floor:app")),
    ):
        found[name] = _run(make(), lambda server: counts(server, ("create",), None))["create"]
        if with_instructions and name != "fastapi-peer":
            where = scratch(f"process-{name}")
            tool = [*CALLGRIND, f"--callgrind-out-file={where}/cg.%p"]
            under = (
                peer("contract peer", False, contract=True, access_log=True, valgrind=tool)
                if name == "fastapi-contract-peer"
                else service(None, valgrind=where, app="floor:app")
            )
            counted = _run(under, lambda server: instructions(instrumented(server), where, ("create",)))  # noqa: B023
            found[name]["instructions"] = counted["create"]
    return found


def over_budget(found: dict[str, dict[str, dict]], budget: dict[str, dict[str, dict]]) -> list[str]:
    """Each figure past its budget by more than its TOLERANCE, said in one line."""
    problems = []
    for store, kinds in budget.items():
        for kind, limits in kinds.items():
            for figure, limit in limits.items():
                value = found.get(store, {}).get(kind, {}).get(figure)
                if value is None:
                    continue
                slack = TOLERANCE[figure]
                allowed = limit * (1 + slack) if figure == "instructions" else limit + slack
                if value > allowed:
                    problems.append(
                        f"{store} {kind}: {value:,} {figure} per request against a budget of {limit:,}"
                        f" (at most {allowed:,.2f})"
                    )
    return problems


def table(found: dict[str, dict[str, dict]]) -> str:
    lines = [
        "| store | request | instructions | system calls | waits (besides the serving thread's)"
        " | preempted | worker CPU µs |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for store, kinds in found.items():
        for kind, row in kinds.items():
            redis = f" + Redis {row['redis_cpu_us']}" if "redis_cpu_us" in row else ""
            lines.append(
                f"| {store} | {kind} | {row.get('instructions', 0):,} | {row['syscalls']} |"
                f" {row['switches']} ({row['switches_other_threads']}) | {row['preempted']} |"
                f" {row['cpu_us']}{redis} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("kinds", nargs="*", help=f"any of {', '.join(KINDS)} (default: all)")
    parser.add_argument("--store", choices=STORES, action="append", help="memory or redis (default: both)")
    parser.add_argument("--budget", action="store_true", help=f'check against {BUDGET.name}\'s "process"')
    parser.add_argument("--no-instructions", action="store_true", help="no callgrind (seconds, not minutes)")
    parser.add_argument("--peer", action="store_true", help="the FastAPI peer's, bare route's create")
    parser.add_argument(
        "--regress", choices=("thread", "syscall", "instructions"),
        help="the service with this deliberate regression per create (bench/apps/regressed.py)",
    )  # fmt: skip
    args = parser.parse_args()
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    os.environ.setdefault("PLANTS_API_TOKENS", TOKEN)
    # The client on the other core: beside the server it would preempt it once a request.
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    global WARMUP, MEASURED, REGRESS, IDLE_S
    REGRESS = args.regress
    if args.smoke:  # fewer requests, shorter idle windows, and no callgrind
        WARMUP, MEASURED, IDLE_S = 30, 100, 1.0
        args.no_instructions = True
    budget = json.loads(BUDGET.read_text())["process"] if args.budget else {}
    stores = tuple(args.store or (budget or STORES))
    found: dict[str, dict[str, dict]] = {}
    for store in stores:
        kinds = tuple(args.kinds or (budget[store] if budget else KINDS))
        # A store whose budget names no instructions is not started under callgrind (minutes).
        counted = not budget or any("instructions" in budget[store][kind] for kind in kinds)
        found[store] = measure(store, kinds, counted and not args.no_instructions)
        print(table({store: found[store]}).split("\n", 2)[-1] if len(found) > 1 else table(found), flush=True)
    if args.peer:
        found["peers"] = peers(not args.no_instructions)
        print(table({"peers": found["peers"]}).split("\n", 2)[-1])
    problems = over_budget(found, budget) if budget else []
    if budget:
        print("\n".join(problems) or "Every figure is within its budget.")
    save(found, "process", args.json)
    return 1 if problems else 0
