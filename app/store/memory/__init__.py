"""The in-memory store: plants in this process (store.py), its change feed (feed.py), and the
guard that never serves it from several processes (split_guard.py)."""
