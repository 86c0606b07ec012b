"""What the service says about itself: one log format for every process (logs.py), and an id for
every request, in its answer and in each of its log lines (request_ids.py)."""
