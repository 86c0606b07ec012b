"""A TCP proxy on 127.0.0.1 that can hold what clients send and deliver it later: a network that
queues a command (a send queue, a retransmit, a middlebox) and delivers it after its sender gave up.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator


class Proxy:
    """Forwards each client connection to 127.0.0.1:`upstream_port` on a connection of its own,
    as a subclass's `_forward` does."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = [self._listener]
        self._stalled = False
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def close(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()

    def stall_connects(self) -> None:
        """From now on a connect to the proxy never completes (a host whose SYNs go unanswered, as
        a partition has it): no one takes connections from its listener any more, and its queue
        is full, so the kernel drops each new SYN. Connections made before go on as they were."""
        with self._lock:
            self._stalled = True
        address = self._listener.getsockname()
        socket.create_connection(address, timeout=5).close()  # wakes the accept thread: it stops
        self._accepting.join(timeout=5)
        self._listener.listen(0)
        for _ in range(2):  # the first fills the queue of one; the second's SYN is already dropped
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(address)
            with self._lock:
                self._sockets.append(filler)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                if self._stalled:
                    client.close()
                    return
                upstream = socket.create_connection(("127.0.0.1", self._upstream_port), timeout=5)
            except OSError:
                return
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            self._forward(client, upstream)

    def _forward(self, client: socket.socket, upstream: socket.socket) -> None:
        raise NotImplementedError


class HoldingProxy(Proxy):
    """While `hold()` is on, what clients send is kept instead of forwarded. `release()` delivers it
    on the upstream connection it came for, even when its client has gone (reset or closed): the
    upstream connection stays open for it. What upstream answers to a client that has gone is
    kept in `orphan_replies`.
    """

    def __init__(self, upstream_port: int) -> None:
        self._holding = False
        self._held: list[tuple[socket.socket, bytes]] = []
        self.orphan_replies: list[bytes] = []
        super().__init__(upstream_port)

    def hold(self) -> None:
        with self._lock:
            self._holding = True

    def stop_holding(self) -> None:
        """Forward again from now on; what was held stays held."""
        with self._lock:
            self._holding = False

    def release(self) -> None:
        """Deliver what was held, in the order it came."""
        with self._lock:
            held, self._held = self._held, []
        for upstream, data in held:
            upstream.sendall(data)

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(len(data) for _, data in self._held)

    def _forward(self, client: socket.socket, upstream: socket.socket) -> None:
        gone = threading.Event()
        threading.Thread(target=self._to_upstream, args=(client, upstream, gone), daemon=True).start()
        threading.Thread(target=self._to_client, args=(upstream, client, gone), daemon=True).start()

    def _to_upstream(self, client: socket.socket, upstream: socket.socket, gone: threading.Event) -> None:
        for data in received(client):
            with self._lock:
                if self._holding:
                    self._held.append((upstream, data))
                    continue
            if not sent(upstream, data):
                return
        gone.set()  # the upstream connection stays open for what is held

    def _to_client(self, upstream: socket.socket, client: socket.socket, gone: threading.Event) -> None:
        for data in received(upstream):
            if gone.is_set():
                with self._lock:
                    self.orphan_replies.append(data)
                continue
            if not sent(client, data):
                gone.set()
                with self._lock:
                    self.orphan_replies.append(data)


def received(sock: socket.socket) -> Iterator[bytes]:
    """What `sock` receives, chunk by chunk, until it closes or fails."""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        yield data


def sent(sock: socket.socket, data: bytes) -> bool:
    """Whether `data` went whole to `sock`."""
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True
