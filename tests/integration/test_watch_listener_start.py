"""A stream that is its worker's first watcher gets a change another server made right after the
stream opened, on Redis and the 3+3 Redis Cluster.

The worker's feed listener starts with its first watcher, after that watcher's first read; a
write by another process landing before the listener's threads took their cursors was never
heard, and the stream sent heartbeats until the next change of its tag (app/store/redis/listener.py).
"""

from __future__ import annotations

import json
import random
import time
import uuid

import pytest

from tests.conftest import settings_for_store
from tests.feed_client import Client, Stream, query
from tests.servers import Gunicorn

#: Far longer than a change takes to reach a stream; heartbeats (1 s) keep the stream's reads going.
DELIVERY_BOUND_S = 20


@pytest.fixture(params=["redis", "cluster"])
def two_servers(request):
    """Two servers on one store: each is another process to the other, one worker each."""
    env = {
        **settings_for_store(request, request.param),
        "PLANTS_EVENTS_HEARTBEAT": "1",
        "WEB_CONCURRENCY": "1",
    }
    servers = [Gunicorn(env=env)]
    try:
        servers.append(Gunicorn(env=env))
        yield servers
    finally:
        for server in servers:
            server.stop()
        for server in servers:
            assert "Traceback" not in server.output()


def test_a_stream_gets_a_create_made_elsewhere_as_it_opened(two_servers):
    watching, writing = two_servers
    tag = f"first-{uuid.uuid4().hex[:8]}"
    plant_id = random.randrange(1, 1 << 40)
    writer = Client(writing.port)
    # The stream's head comes with its first read: the write follows it at once, while the
    # watching worker's listener is starting.
    stream = Stream(watching.port, f"/events?{query(after='now', tags=tag)}", timeout=DELIVERY_BOUND_S)
    try:
        assert stream.status == 200
        assert writer.call("POST", "/plants", {"id": plant_id, "name": "first", "tag": tag})[0] == 200
        deadline = time.monotonic() + DELIVERY_BOUND_S
        created = None
        for block in stream.blocks():
            if block.get("event") == "plant.created":
                created = json.loads(block["data"])
                break
            if time.monotonic() > deadline:
                break
    finally:
        stream.close()
        writer.close()
    assert created is not None, "the stream never sent the create"
    assert created["plant"]["id"] == plant_id
    assert created["plant"]["tag"] == tag
