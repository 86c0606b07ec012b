"""The Redis store: one Redis or a Redis Cluster (store.py), its client and script runner
(client.py), its errors translated once (failures.py), its readiness probe (probe.py), its key
layout and Lua (lua.py and scripts/*.lua), bucket groups, index hints, pages and the change feed."""
