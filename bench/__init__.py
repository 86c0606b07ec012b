"""The benchmark: `python bench/run.py` (see README, "Performance")."""
