"""The benchmarks' smoke mode (`python -m bench NAME --smoke`): each runs end to end and its output
parses. Speed is not asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.servers import ROOT


def smoke_run(name: str, tmp_path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """A benchmark's smoke mode: its output and its JSON results."""
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench", name, "--smoke", "--json", str(out), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, json.loads(out.read_text())


def test_floor_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("floor", tmp_path)
    assert results["valid"] is True
    assert results["problems"] == []
    for name in ("service", "floor", "peer", "contract_peer", "loaded", "refused_401", "refused_400"):
        assert results[name]["rps"] > 0
        assert results[name]["p99_us"] >= results[name]["p50_us"] > 0
        assert results[name]["cpu_us_per_request"] > 0
        cpu = results[name]["spread"]["cpu_us_per_request"]
        assert 0 < cpu["min"] <= cpu["median"] <= cpu["max"]
    assert set(results["ratios"]) == {
        "service_to_contract_peer_rps", "service_to_contract_peer_cpu", "service_to_peer_rps",
        "service_to_peer_cpu", "service_to_floor_rps", "service_to_floor_cpu", "service_to_peer_p99",
        "loaded_to_empty_p99", "refused_401_to_create_rps", "refused_400_to_create_rps",
    }  # fmt: skip
    for ratio in results["round_ratios"].values():
        assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
    assert results["bytes_per_plant"] > 0
    assert "| service (create) |" in result.stdout
    assert "| FastAPI contract peer (create, access line on) |" in result.stdout
    assert "| the FastAPI contract peer (access line on) |" in result.stdout
    assert "VALID" in result.stdout


@pytest.mark.parametrize("path", ["floor", "400", "401"])
def test_instruction_count_requests_have_their_status(path):
    # The in-process loop that `python -m bench instructions` counts checks every status itself.
    # The budgeted paths (create, create-hooked, get, put, page) are checked by the same loop
    # under valgrind in test_instruction_budget.py: not run twice.
    result = subprocess.run(
        [sys.executable, "-m", "bench", "instructions", "--serve", path, "200"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def test_create_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("create", tmp_path)
    assert results["valid"] is True
    for name in ("memory", "memory, metrics off", "memory, limits on", "redis", "redis, metrics off",
                 "redis, limits on", "redis, 2 workers", "peer"):  # fmt: skip
        assert results[name]["rps"] > 0
    assert results["redis"]["redis_cpu_us_per_request"] > 0
    assert 0 < results["used_memory_per_plant"] < 1000
    assert results["model"]["projected_rps"]["2"] >= results["model"]["projected_rps"]["1"]
    assert "(a) Redis 1 worker / memory 1 worker" in result.stdout


def test_readable_store_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("reads", tmp_path)
    assert results["valid"] is True  # every GET answered 200, every create 2xx
    for store in ("memory", "redis"):
        for workload in (
            "create",
            "get, small",
            "get, large",
            "page, small",
            "page, large",
            "rare page, large",
        ):
            assert results[f"{store}: {workload}"]["rps"] > 0
    assert (
        results["redis: page, large"]["server_cpu_us_per_request"]
        > results["redis: page, large"]["cpu_us_per_request"]
    )  # redis-server's share is counted
    assert 0 < results["used_memory_per_plant, redis, large"] < 1000
    assert 0 < results["memory store bytes per plant at 2000"] < 1000
    assert "| memory: get / create (req/s, large store) |" in result.stdout


def test_access_tokens_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("access-tokens", tmp_path)
    assert results["valid"] is True  # every create answered 2xx, with either token
    assert set(results["ratios"]) == {"static", "static, JWT on", "JWT"}
    for name in results["ratios"]:
        assert results[name]["rps"]["median"] > 0
    assert set(results["verify_us"]) == {"first use, RS256", "first use, ES256", "repeated (cached)"}
    assert results["verify_us"]["first use, RS256"] > results["verify_us"]["repeated (cached)"] > 0
    assert "| JWT |" in result.stdout


def test_changes_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("changes", tmp_path)
    assert results["valid"] is True  # every PUT and PATCH 200, every conditional GET 304
    for store in ("memory", "redis"):
        for work in ("create", "put", "retag", "patch", "get", "get304"):
            assert results[f"{store}: {work}"]["rps"]["median"] > 0
    assert results["redis: put"]["redis_cpu_us_per_request"]["median"] > 0
    assert "| redis: put / create |" in result.stdout


def test_events_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("events", tmp_path)
    assert results["valid"] is True  # every create and page 200
    for name in ("memory, feed on", "memory, feed off", "redis, feed on", "redis, feed off"):
        assert results[f"{name}: create"]["rps"]["median"] > 0
    assert results["redis direct"]["script per create, on (us)"] > 0
    assert results["memory bytes per event"] > 0
    assert results["follower lag, redis, feed on"]["polls"] > 0
    assert "| redis: create, feed on / off |" in result.stdout


def test_ab_benchmark_smoke_run(tmp_path):
    """The working tree against its own HEAD: every figure for both trees, ratios near 1."""
    result, results = smoke_run("ab", tmp_path, "--ref", "HEAD")
    assert results["valid"] is True
    for store in ("memory", "redis"):
        assert results["ratios"][f"http: {store}: create"] > 0
        assert results["cpu"][f"{store}: create: working tree"]["min"] > 0  # the CPU, with its spread
    for write in ("create (sequential ids)", "create (random ids)", "rename", "delete"):
        assert results["redis"][f"{write}: redis_cpu_us: working tree"]["median"] > 0
        assert results["ratios"][f"redis: {write}: script_us"] > 0
    assert results["redis"]["memory per plant: bytes: HEAD"]["median"] > 0
    assert "| http: redis: create (req/s) |" in result.stdout
    assert "| cpu: memory: create (worker CPU µs/request) |" in result.stdout


def test_layouts_benchmark_smoke_run(tmp_path):
    """Every layout creates every plant, and is priced beside the index-free create (a smoke run
    compares no timings: which costs Redis more is bench/README.md's, from full runs)."""
    result, results = smoke_run("layouts", tmp_path)
    layouts = results["layouts"]
    assert len(layouts) == 6
    assert "no index (c341a06)" in layouts
    for found in layouts.values():
        assert found["bytes per plant"]["median"] > 0
        assert found["random: script_us"]["median"] > 0
    assert "| B-tree, leaves of 128 |" in result.stdout


def test_layouts_parts_smoke_run(tmp_path):
    """Each part of the shipped create is priced, the same code as a Redis Function (FCALL) too."""
    result, results = smoke_run("layouts", tmp_path, "--parts")
    parts = results["layouts"]
    for name in ("shipped", "shipped, as a Function (FCALL)", "the two fence look-ups only"):
        assert parts[name]["sequential: script_us"]["median"] > 0
    assert "| shipped, as a Function (FCALL) |" in result.stdout


def test_webhooks_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("webhooks", tmp_path)
    assert results["valid"] is True
    for way in ("new connection per attempt", "kept alive"):
        deliveries = results["deliveries"][way]
        assert deliveries["per_second"]["median"] > 0
        assert deliveries["deliverer_cpu_us_per_delivery"]["median"] > 0
        assert deliveries["acks_per_delivery"] == 1.0  # one acknowledgement per delivery, no more
        assert deliveries["leases_per_delivery"] <= 1.0
        assert f"| {way} |" in result.stdout
    for kind in ("none", "apart", "in-worker"):
        assert results["creates"][kind]["rps"]["median"] > 0


def test_slow_receivers_benchmark_smoke_run(tmp_path):
    result, results = smoke_run("slow-receivers", tmp_path, "--timeout", "2", "--seconds", "3")
    assert results["valid"] is True
    (run,) = results["runs"]
    assert run["slow"] == 8
    assert run["delivered"] == run["events"] > 0
    assert "| this | 8 |" in result.stdout


def test_process_benchmark_smoke_run(tmp_path):
    """Every request kind on the memory store: its system calls and context switches per request."""
    result, results = smoke_run("process", tmp_path, "--store", "memory")
    for kind in ("create", "get", "page", "patch", "watch"):
        figures = results["memory"][kind]
        assert figures["syscalls"] >= 3, figures  # at least a wait, a read and a send
        assert figures["switches"] >= 0, figures
    assert results["memory"]["watch"]["syscalls"] > results["memory"]["create"]["syscalls"]
    assert "| memory | create |" in result.stdout


def test_filtered_watch_benchmark_smoke_run(tmp_path):
    # The filtered streams and the snapshot only (wrk's create runs are left to the full run).
    _, results = smoke_run("watch", tmp_path, "--scenarios", "wake", "snapshot", "--filtered")
    wake, snapshot = results
    assert wake["scenario"] == "wake"
    assert wake["filtered"] is True
    assert wake["creates"] > 0
    assert wake["streams_with_every_event_in_order"] == wake["streams"]
    # Each create is tagged for one stream: the wake-up index wakes that one (a bound, not a speed).
    assert 0 < wake["woken_per_write"] <= 2
    assert snapshot["scenario"] == "snapshot"
    assert snapshot["status"] == 200
    assert snapshot["ended"] is True
    assert snapshot["existing"] >= snapshot["plants"]


def test_reload_benchmark_smoke_run(tmp_path):
    """A reload under creates and watchers of both kinds: nothing lost, its figures parse."""
    result, results = smoke_run("reload", tmp_path, "--watchers", "2")
    (size,) = results["sizes"]
    assert results["valid"] is True, results["problems"]
    assert size["failures"] == 0
    assert size["acknowledged"] > 0
    assert size["seen"] == [size["acknowledged"]] * 2  # the long-poll's and the stream's
    assert size["pause_s"] > 0
    assert size["old_rss_mib"] > 0
    assert size["new_rss_mib"] > 0
    assert "| 2,000 |" in result.stdout
