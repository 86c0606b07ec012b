"""What every benchmark shares, and nothing a benchmark measures: the servers (`servers`), the load
(`load`), Redis's CPU (`redis_cpu`) and the command line with its results (`report`). Here: the
constants all of them use, importable without starting anything."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
#: The bearer token every server under test accepts and every load generator sends.
TOKEN = "bench-token"
#: The server under test runs on one core, the load and redis-server on the other.
SERVER_CPU, CLIENT_CPU = "0", "1"
