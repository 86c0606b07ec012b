"""The Redis store: one Redis or a Redis Cluster (store.py), its client and script runner
(connection.py), its errors translated once (errors.py), its key layout and Lua (lua.py and
scripts/*.lua), bucket groups, index hints, pages and the change feed."""
