"""The benchmarks, one tool: `python -m bench NAME` (bench/__main__.py; bench/README.md lists them)."""
