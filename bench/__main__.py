"""`python -m bench NAME [options]`: run one benchmark; `python -m bench` lists them.

Each benchmark is the module bench/NAME.py (dashes for underscores) with a `main()` that reads its
options from the command line; `python -m bench NAME --help` prints them. Every one takes
`--smoke` (a short run, the tests' mode), `--rounds`, `--seconds` and `--json`.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    "floor", "create", "reads", "changes", "events", "access-tokens", "webhooks", "slow-receivers", "watch",
    "cluster", "failover", "partitions", "slow-clients", "attacks", "page-bound", "latency",
    "instructions", "process", "layouts", "ab", "forwarded", "plant-bytes", "reload", "filtered-writes",
)  # fmt: skip


def summary(name: str) -> str:
    """The first line of a benchmark's docstring, read without importing it."""
    source = (HERE / f"{name.replace('-', '_')}.py").read_text()
    return (ast.get_docstring(ast.parse(source)) or "").split("\n", 1)[0]


def main() -> int:
    available = [name for name in BENCHMARKS if (HERE / f"{name.replace('-', '_')}.py").exists()]
    if len(sys.argv) < 2 or sys.argv[1] not in available:
        width = max(map(len, available))
        lines = [f"  {name:<{width}}  {summary(name)}" for name in available]
        print("usage: python -m bench NAME [--smoke] [--rounds N] [--seconds S] [--json PATH] ...\n")
        print("\n".join(lines))
        return 0 if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help") else 2
    name = sys.argv[1]
    module = importlib.import_module(f"bench.{name.replace('-', '_')}")
    sys.argv = [f"python -m bench {name}", *sys.argv[2:]]  # the benchmark's own parser reads the rest
    return module.main() or 0


if __name__ == "__main__":
    sys.exit(main())
