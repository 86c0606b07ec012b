"""The benchmarks stay one tool: every `bench/NAME.py` that `python -m bench` lists has a `main()`,
imports only the harness and the apps from `bench/` (no benchmark imports another), and none of
bench/ edits `sys.path` (the tool runs as `python -m bench` from the tree's root)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS
from tests.servers import ROOT

BENCH = ROOT / "bench"
MODULES = [BENCH / f"{name.replace('-', '_')}.py" for name in BENCHMARKS]


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", [path for path in MODULES if path.exists()], ids=lambda path: path.stem)
def test_a_benchmark_has_a_main_and_imports_no_other_benchmark(path: Path):
    tree = ast.parse(path.read_text())
    assert any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body)
    for name in imported(tree):
        if name == "bench" or name.startswith("bench."):
            assert name.startswith(("bench.harness", "bench.apps")), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", sorted(BENCH.rglob("*.py")), ids=lambda path: str(path.relative_to(BENCH)))
def test_nothing_in_bench_edits_sys_path(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
            raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno} uses sys.path")


def test_the_tool_lists_every_benchmark():
    result = subprocess.run(
        [sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    for path in MODULES:
        if path.exists():
            assert f"  {path.stem.replace('_', '-')} " in result.stdout
