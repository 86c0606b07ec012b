"""Creates with a repeated JWT access token against a static token; a token's first check.

    python -m bench access-tokens            # 5 interleaved rounds of 10 s per contestant
    python -m bench access-tokens --smoke    # a second per contestant

Three contestants, each a gunicorn with the shipped configuration on the memory store, driven by
wrk with the same create script, interleaved round by round:
- "static": a static token, JWT access tokens off (the service as it was);
- "static, JWT on": the same static token on a server that also accepts JWTs;
- "JWT": one RS256 access token, repeated (as a client reuses its token until it expires).
The identity provider is the tests' local one (tests/issuer.py) on 127.0.0.1.

Also, in process: the first use of a token (a full RS256 and ES256 check through the app's
verifier, each token new) and a repeated token's use (the verified-token cache), in µs.
"""

from __future__ import annotations

import functools
import statistics
import time

from bench.harness import TOKEN
from bench.harness.load import by_work, failed, wrk
from bench.harness.report import benchmark_parser, finish, show_spread, spread, validity
from bench.harness.servers import gunicorn, stop_all
from tests.issuer import AUDIENCE, Issuer


def first_use_us(issuer: Issuer, count: int) -> dict[str, float]:
    """The median µs of verifying a new RS256 token and a new ES256 one, and a repeated one."""
    from app import create_app

    app = create_app(
        {"PLANTS_API_TOKENS": TOKEN, "PLANTS_JWT_ISSUER": issuer.url, "PLANTS_JWT_AUDIENCE": AUDIENCE}
    )
    auth = app.extensions["plants"].auth
    deadline = time.monotonic() + 10
    while not auth.ready:
        if time.monotonic() > deadline:
            raise RuntimeError("the provider's keys were not loaded")
        time.sleep(0.01)
    results = {}
    for name, key in (("RS256", issuer.keys[0]), ("ES256", issuer.keys[1])):
        tokens = [f"Bearer {issuer.token(key=key, jti=str(number))}" for number in range(count)]
        times = []
        for header in tokens:
            started = time.perf_counter()
            problem, _ = auth.authenticate(header)
            times.append(time.perf_counter() - started)
            assert problem is None
        results[f"first use, {name}"] = statistics.median(times) * 1e6
    header = f"Bearer {issuer.token()}"
    auth.authenticate(header)
    times = []
    for _ in range(count * 10):
        started = time.perf_counter()
        auth.authenticate(header)
        times.append(time.perf_counter() - started)
    results["repeated (cached)"] = statistics.median(times) * 1e6
    return results


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (1 if args.smoke else 10)
    issuer = Issuer()
    issuer.cache_control = "max-age=86400"
    jwt_env = {"PLANTS_JWT_ISSUER": issuer.url, "PLANTS_JWT_AUDIENCE": AUDIENCE}
    servers = {
        "static": gunicorn("static"),
        "static, JWT on": gunicorn("static, JWT on", jwt_env),
        "JWT": gunicorn("JWT", jwt_env),
    }
    # A token for the whole run (the cache keeps it until its exp).
    tokens = {"static": TOKEN, "static, JWT on": TOKEN, "JWT": issuer.token(exp=int(time.time()) + 7200)}
    problems: list[str] = []
    results: dict = {"rounds": rounds, "seconds": seconds, "connections": args.connections}
    runs: dict[str, list[dict]] = {name: [] for name in servers}
    id_base = 0
    try:
        for server in servers.values():
            server.start()
        # The first round warms up, but not in a smoke run, which only checks that each serves.
        for round_number in range(int(args.smoke), rounds + 1):
            calls = {}
            for name, server in servers.items():
                id_base += 10**13
                env = {"BENCH_ID_BASE": str(id_base), "BENCH_TOKEN": tokens[name]}
                run_seconds = 1 if round_number == 0 else seconds
                calls[(name, "create")] = functools.partial(
                    wrk, server, "create.lua", run_seconds, args.connections, env
                )
            # A smoke run has the three servers at once: it only shows that each serves.
            for (name, _), run in by_work(calls, args.smoke).items():
                if failed(run):
                    problems.append(f"{name}: {run}")
                if round_number:
                    runs[name].append(run)
    finally:
        stop_all(servers.values())
    for name, name_runs in runs.items():
        results[name] = {key: spread(name_runs, key) for key in ("rps", "cpu_us_per_request", "p99_us")}
    baseline = results["static"]["rps"]["median"]
    results["ratios"] = {name: results[name]["rps"]["median"] / baseline for name in servers}
    results["verify_us"] = first_use_us(issuer, 50 if args.smoke else 500)
    issuer.stop()
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    lines = [
        f"{results['rounds']} interleaved rounds of {results['seconds']:g} s, wrk -t1 "
        f"-c{results['connections']}, memory store, one gunicorn worker each; median (min to max).",
        "",
        "| contestant | creates/s | / static | worker CPU per create (µs) | p99 (µs) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, ratio in results["ratios"].items():
        found = results[name]
        lines.append(
            f"| {name} | {show_spread(found['rps'], ',.0f')} | {ratio:.3f} "
            f"| {show_spread(found['cpu_us_per_request'])} | {show_spread(found['p99_us'], ',.0f')} |"
        )
    lines += ["", "| verifying a token, in process | µs (median) |", "|---|---:|"]
    lines += [f"| {name} | {value:.1f} |" for name, value in results["verify_us"].items()]
    lines += ["", validity(results)]
    return "\n".join(lines)
