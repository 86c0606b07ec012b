"""The price of a request, guarded: the app's instructions per create (and per create with 10 webhook
endpoints registered: push delivery adds nothing to the request path), read, PUT and page, counted
under valgrind in process on the memory store (`python -m bench instructions`), may not pass the budget
committed in bench/instruction-budget.json by more than 3%. A change that makes a request cheaper
lowers the budget in the same commit; raising it takes a commit that says why (CONTRIBUTING.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.instructions import BUDGET, ROOT, TOLERANCE, over_budget

PATHS = ("create", "create-hooked", "get", "put", "page")


def test_the_budget_covers_the_guarded_requests():
    assert set(PATHS) <= set(json.loads(BUDGET.read_text()))


@pytest.mark.parametrize("path", PATHS)
def test_a_request_stays_within_its_instruction_budget(path, tmp_path):
    """Through the command a contributor runs (`python -m bench instructions --budget PATH`), its
    results written under tmp_path rather than into the source tree's bench/results/."""
    counts = tmp_path / "instructions.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench", "instructions", "--budget", path, "--json", str(counts)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    (row,) = [line for line in result.stdout.splitlines() if line.startswith(f"| {path} |")]
    assert int(row.split("|")[2].strip().replace(",", "")) > 100_000, row
    assert json.loads(counts.read_text())[path] > 100_000
    assert result.stdout.rstrip().endswith("Every path is within its budget.")


def test_the_check_fails_a_request_over_its_budget():
    budget = {"create": 100_000}
    assert over_budget({"create": int(100_000 * (1 + TOLERANCE))}, budget) == []
    (problem,) = over_budget({"create": int(100_000 * (1 + TOLERANCE)) + 1}, budget)
    assert problem.startswith("create: 103,001 instructions per request, +3.0% against the budget of 100,000")
