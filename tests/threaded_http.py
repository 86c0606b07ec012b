"""A test's own stdlib HTTP server (the identity provider, the webhook receiver, a collector, a
relay), served on a daemon thread and stopped at once."""

from __future__ import annotations

import socketserver
import threading

#: How often `serve_forever` looks whether `shutdown()` was called. Its default, 0.5 s, is what
#: every stop waited in the test's teardown (about 60 worker-seconds of the suite for nothing); a
#: request is served as soon as it comes whatever this is.
SHUTDOWN_POLL_S = 0.02


def serve_in_thread(server: socketserver.BaseServer) -> None:
    """`server.serve_forever()` on a daemon thread; `server.shutdown()` returns within 20 ms."""
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True
    ).start()
