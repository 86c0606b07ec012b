"""The price of a request, guarded: the app's instructions per create (and per create with 10 webhook
endpoints registered: push delivery adds nothing to the request path), read, PUT and page, counted
under valgrind in process on the memory store (bench/instructions.py), may not pass the budget
committed in bench/instruction-budget.json by more than 3%. A change that makes a request cheaper
lowers the budget in the same commit; raising it takes a commit that says why (CONTRIBUTING.md)."""

from __future__ import annotations

import json

import pytest

from bench.instructions import BUDGET, TOLERANCE, over_budget, per_request

PATHS = ("create", "create-hooked", "get", "put", "page")


def test_the_budget_covers_the_guarded_requests():
    assert set(PATHS) <= set(json.loads(BUDGET.read_text()))


@pytest.mark.parametrize("path", PATHS)
def test_a_request_stays_within_its_instruction_budget(path):
    budget = json.loads(BUDGET.read_text())
    assert over_budget({path: per_request(path)}, budget) == []


def test_the_check_fails_a_request_over_its_budget():
    budget = {"create": 100_000}
    assert over_budget({"create": int(100_000 * (1 + TOLERANCE))}, budget) == []
    (problem,) = over_budget({"create": int(100_000 * (1 + TOLERANCE)) + 1}, budget)
    assert problem.startswith("create: 103,001 instructions per request, +3.0% against the budget of 100,000")
