"""One client connection and its protocol (`Conn`): its socket, the parser's protocol (it is a
`Reader`, reader.py), its answer on the way out (answer.py's `Outgoing`), its deadline, and the
turns a request thread takes on it.

Every request thread waits on the worker's one epoll, where each connection is registered with
`EPOLLONESHOT` (loop.py): the kernel hands each ready connection to exactly one thread, for
one turn (`turn`). A turn makes progress or closes:

- it reads once from the socket and feeds the bytes to the connection's parser; end-of-file in
  the middle of a request closes the connection at once;
- once a request is whole, it serves that one request, in this thread (serving.py), and sends
  the answer without blocking: what the client does not take at once waits on the epoll for the
  socket to become writable;
- a connection with more requests buffered (a pipelining client) is then armed for writing,
  which puts it at the back of the kernel's ready list: every other ready connection gets a
  turn before its next request is served.

So a slow client holds no thread, only its buffered bytes and its deadline. An answer can be
completed later by any thread, through `answer(data, keep_alive)`. Where a step needs the
worker's registry (re-arm on the epoll, forget, account bytes) or its parking, it calls them
through the `Context` every connection of the worker shares.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from select import EPOLLRDHUP
from typing import TYPE_CHECKING, Any, Protocol

from app.server.worker.answer import DONE, WAITING, Outgoing, close_body
from app.server.worker.reader import BODY, IDLE, TIMED_OUT, Limits, Reader, Refusal, Request, encode_refusal

if TYPE_CHECKING:
    from collections.abc import Callable


#: EPOLLRDHUP: a client that closed after part of a request is closed in the same turn.
READ = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT
WRITE = select.EPOLLOUT | select.EPOLLONESHOT
#: A parked answer's connection: woken by its client leaving (or, armed WRITE, by its `wake`).
PARKED = select.EPOLLRDHUP | select.EPOLLONESHOT
_RECV_BYTES = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: A slow client is given this many bytes a second on top of its deadline, for a large body or answer.
BYTES_PER_SECOND = 65536
#: How long, and for how many bytes, a connection closed after its answer lingers for the client
#: to close its side (as gunicorn's util.close_graceful, which blocks: this one waits on the epoll).
LINGER_SECONDS, LINGER_BYTES = 2.0, 65536


class RegistryPort(Protocol):
    """What a connection asks of its worker's registry (loop.py)."""

    def rearm(self, conn: Conn, events: int) -> None: ...
    def rearm_idle(self, conn: Conn) -> None: ...
    def rest_idle(self, conn: Conn) -> None: ...
    def linger(self, conn: Conn) -> None: ...
    def forget(self, conn: Conn) -> None: ...
    def unpark(self, conn: Conn) -> Any: ...


class ParkingPort(Protocol):
    """What a connection asks of its worker's parking (parking.py)."""

    def step(self, conn: Conn) -> None: ...
    def resume(self, conn: Conn) -> None: ...


class Context:
    """What every connection of a worker shares: its collaborators and its settings."""

    __slots__ = ("limits", "log", "parking", "read_timeout", "registry", "serve")

    def __init__(
        self,
        registry: RegistryPort,
        parking: ParkingPort,
        serve: Callable[[Conn, Request], tuple[bytes, bool] | None],
        log: Any,
        read_timeout: float,
        limits: Limits,
    ) -> None:
        self.registry, self.parking, self.serve = registry, parking, serve
        self.log, self.read_timeout, self.limits = log, read_timeout, limits


class Standing:
    """A connection's standing with its worker: taken up or not (`busy`), its deadline, idle since
    when, lingering, the bytes it was last counted for, its waiting answer. The loop and parking
    change it through these methods only, with the registry's lock held."""

    busy: bool
    deadline: float
    idle_since: float
    lingering: bool
    held: int
    parked: Any
    woken: bool

    def holding(self) -> int:
        raise NotImplementedError

    def take(self) -> bool:
        """Taken up by a thread for a turn; False when another thread has it."""
        if self.busy:
            return False
        self.busy = True
        return True

    def hand_back(self) -> None:
        """Its turn has ended: any thread may take it again."""
        self.busy = False

    def due_by(self, deadline: float) -> None:
        self.deadline = deadline

    def due_no_later_than(self, deadline: float) -> None:
        self.deadline = min(self.deadline, deadline)

    def rests_since(self, now: float) -> None:
        """Idle (between requests) from `now`."""
        self.idle_since = now

    def start_lingering(self) -> None:
        self.lingering = True

    def recount(self) -> int:
        """Count what it holds now; the change since it was last counted."""
        held = self.holding()
        change, self.held = held - self.held, held
        return change

    def release_held(self) -> int:
        """Closed: it holds nothing more; what it held."""
        held, self.held = self.held, 0
        return held

    def park(self, parked: Any) -> None:
        """Its answer waits (parking.py)."""
        self.parked = parked

    def unpark(self) -> Any:
        """Its waiting answer, taken off it; None if none."""
        parked, self.parked = self.parked, None
        return parked

    def mark_woken(self, woken: bool = True) -> None:
        """Its waiting answer has (or, False, has not yet) a next step."""
        self.woken = woken


class Conn(Standing, Reader):
    """A client connection. Exactly one thread acts on it at a time (`busy`)."""

    def __init__(self, sock: socket.socket, client: Any, server: Any, context: Context) -> None:
        self.sock = sock
        self.fd = sock.fileno()  # kept: fileno() is -1 once the socket is closed
        self.client = client
        self.server = server
        self.context = context
        Reader.__init__(self, context.limits)  # the parser's protocol: its callbacks land here
        self.outgoing = Outgoing(sock)
        self.held = 0  # the bytes of the worker's memory budget this connection was last counted for
        self.busy = False
        self.lingering = False
        self.lingered = 0
        self.deadline = 0.0
        self.idle_since = 0.0
        self.environ_base: dict[str, Any] | None = None  # the environ's per-connection keys
        self.trusted_peer = False  # may set the scheme (gunicorn's forwarded_allow_ips)
        self.parked: Any = None  # an answer that waits (parking.py), and whether it was woken
        self.woken = False

    def keep_environ(self, base: dict[str, Any], trusted_peer: bool) -> None:
        """What every request of this connection shares (environ.py), kept for the next."""
        self.environ_base, self.trusted_peer = base, trusted_peer

    @property
    def reading_request(self) -> bool:
        """Part of a request has come, and not all of it."""
        outgoing = self.outgoing
        return (
            (self.phase != IDLE or bool(self.unparsed))
            and outgoing.out is None
            and outgoing.body is None
            and not self.lingering
        )

    def holding(self) -> int:
        """The bytes the worker holds for this connection: its unparsed and parsed request bytes,
        its unsent answer, and a waiting answer's collected pieces."""
        held = self.request_bytes()
        out = self.outgoing.out
        if out is not None:
            held += len(out.obj)  # type: ignore[arg-type]  # the whole buffer stays while a part is unsent
        if self.parked is not None:
            held += self.parked.held()
        return held

    def turn(self, mask: int) -> None:
        """One turn, on a connection this thread has taken (loop.py's `Registry.take`)."""
        try:
            if self.lingering:
                self._drain()
            elif self.outgoing.out is not None or self.outgoing.body is not None:
                if self._went(self.outgoing.flush(self.context.log)):
                    self._after_answer(not self.outgoing.close_after)
            elif self.parked is not None:
                self.context.parking.resume(self)
            elif self.has_work or self._receive(mask & EPOLLRDHUP):
                self._answer_next()
        except Exception:
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _receive(self, closed: int) -> bool:
        """Read once and parse; False when there is nothing to do (closed, or re-armed).
        `closed`: the client has closed its side, so what it sent is all there will be."""
        try:
            data = self.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            self.context.registry.rearm(self, READ)
            return False
        except OSError:
            data = b""
        if not data:  # the client closed: a request it had begun can never be whole
            self.close()
            return False
        now = time.monotonic()
        idle_deadline = self.deadline
        read_timeout = self.context.read_timeout
        if self.phase == IDLE:  # a new request's first bytes: its head's deadline starts
            self.deadline = now + read_timeout
        had_head = self.phase == BODY
        self.feed(data)
        if self.phase == IDLE and not self.has_work:  # only the empty lines llhttp skips
            self.deadline = idle_deadline
            self.context.registry.rest_idle(self)
            return False
        if closed and not self.has_work:
            self.close()
            return False
        if self.phase == BODY and not had_head and not self.ready:
            self.deadline = now + read_timeout + self.context.limits.body / BYTES_PER_SECOND
        return True

    def _answer_next(self) -> None:
        if not self.ready and self.unparsed and self.refusal is None:
            self.feed(b"")  # the rest of a pipelining client's bytes
            if self.phase != IDLE:
                self.deadline = time.monotonic() + self.context.read_timeout
        if self.ready or self.refusal is not None:
            self.outgoing.started, self.outgoing.sent = time.monotonic(), 0
        if self.ready:
            served = self.context.serve(self, self.ready.popleft())
            if served is not None:  # else a waiting answer has the connection (parking.py)
                self.answer(*served)
        elif self.refusal is not None:
            self._refuse(self.refusal)
        else:
            self._await_more()

    def _refuse(self, refusal: Refusal) -> None:
        self.context.log.warning("Answered %s to a client: %s", refusal.status, refusal.message)
        self.answer(encode_refusal(refusal), keep_alive=False)

    def answer(self, data: bytes, keep_alive: bool) -> None:
        """Send an answer on this connection, which this thread holds (busy), then hand it back.
        Its body's rest, if it has one, is `outgoing.body`, sent as the client takes it."""
        body = self.outgoing.body
        if body is not None:
            # The whole answer is to be taken within the read timeout, plus a second per 64 KiB.
            size = len(data) + (body.left or 0)
            self.deadline = time.monotonic() + self.context.read_timeout + size / BYTES_PER_SECOND
        if self.send(data, close_after=not keep_alive) and (
            body is None or self._went(self.outgoing.pump(self.context.log))
        ):
            self._after_answer(keep_alive)

    def _after_answer(self, keep_alive: bool) -> None:
        if self.parked is not None:  # a stream's chunk went out: ask for the next
            self.context.parking.step(self)
        elif not keep_alive:
            self.close_gracefully()
        elif self.has_work:
            self.context.registry.rearm(self, WRITE)  # the socket is writable: back of the queue, not a spin
        else:
            self._await_more()

    def _await_more(self) -> None:
        if self.phase == IDLE:
            self.context.registry.rearm_idle(self)
            return
        if self.wants_continue:
            self.wants_continue = False
            with contextlib.suppress(OSError):
                self.sock.send(_CONTINUE)  # 25 bytes into an empty send buffer
        self.context.registry.rearm(self, READ)

    def send(self, data: bytes, *, close_after: bool) -> bool:
        """Send what the socket takes now; True when all of it went. The rest waits on the epoll."""
        outgoing = self.outgoing
        went = outgoing.send(data, close_after)
        if went == WAITING and outgoing.body is None:
            assert outgoing.out is not None
            wait = self.context.read_timeout + len(outgoing.out) / BYTES_PER_SECOND
            self.deadline = time.monotonic() + wait
        return self._went(went)

    def _went(self, went: int) -> bool:
        """Act on how a send went: True when it is all out; else re-armed, or closed."""
        if went == DONE:
            return True
        if went == WAITING:
            self.context.registry.rearm(self, WRITE)
        else:
            self.close()
        return False

    def time_out(self) -> None:
        """Past its deadline (run by the main thread, which has taken it)."""
        if self.reading_request:
            # Too slow with its request: 408, then close as after any answer.
            self.context.log.warning(
                "Answered 408 to a client that did not send its whole request within %ss",
                self.context.read_timeout,
            )
            with contextlib.suppress(OSError):
                self.sock.send(encode_refusal(TIMED_OUT))
            self.close_gracefully()
        else:  # idle, lingering, not taking its answer (a stream's included)
            self.close()

    def close_gracefully(self) -> None:
        # RFC 9112 section 9.6: send FIN, then read and discard what the client still sends
        # until it closes, so that unread request bytes cannot make the kernel reset the
        # connection and cut off the answer. The lingering happens on the epoll.
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()
            return
        self.context.registry.linger(self)  # no longer counted against the cap
        self.discard()
        self.deadline = time.monotonic() + LINGER_SECONDS
        self.context.registry.rearm(self, READ)

    def _drain(self) -> None:
        try:
            data = self.sock.recv(LINGER_BYTES)
        except BlockingIOError:  # woken with nothing to read: keep lingering
            self.context.registry.rearm(self, READ)
            return
        except OSError:
            data = b""
        self.lingered += len(data)
        if data and self.lingered < LINGER_BYTES:
            self.context.registry.rearm(self, READ)
        else:
            self.close()

    def close(self) -> None:
        """Close the connection, and end its waiting answer if it has one (its watch's place is
        given back), whichever way the connection ends: its client left, a send failed, or a
        deadline passed."""
        parked = self.context.registry.unpark(self)
        log = self.context.log
        if parked is not None:  # left before its end: its access line now
            parked.left(log)
        # Forgotten before it is closed: once closed, its number can be reused by the next accept.
        self.context.registry.forget(self)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.drop_body()

    def attach_body(self, body: Any) -> None:
        """The rest of the answer, sent as the client takes it (answer.py's `FileBody`, `IterBody`)."""
        self.outgoing.body = body

    def drop_body(self) -> None:
        """The rest of the answer is not to be sent: closed (its file, or the app's iterable)."""
        body, self.outgoing.body = self.outgoing.body, None
        if body is not None:
            close_body(body, self.context.log)
