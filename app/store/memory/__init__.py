"""The in-memory store: plants in this process (store.py, their table in table.py) and its change
feed (feed.py). The app never serves it from several processes (app/http/split_guard.py)."""
