"""Watching the change feed: the process's watchers and what wakes them (feed_signal.py; other
processes' writes heard by feed_listener.py), the reads they share (shared_reads.py), the read
slots they take on a request thread (wake_gate.py), how each is woken (wake_up.py), the
long-polls and streams themselves (watches.py), and the contract the packaged worker's parking
(app/server/worker/parking.py) offers them to wait without a thread (parkable.py). The views
(app/plants/events.py) build on it; the store knows nothing of it. Where a watch waits, hop by
hop: CONTRIBUTING.md, "Where a watch waits"."""
