"""Whom the worker displaces first, at the connection cap, out of descriptors, or past its memory
budget (admission.py, budget.py): the connection making the least progress.

A lingering close first (its answer is out; only its client's FIN is awaited), then an idle one
(the longest idle first) or one whose request arrives, or whose answer is taken, at the fewest
bytes a second. A connection that has just connected or been answered is spared for
`IDLE_GRACE`; one whose request is being served (busy), or whose answer waits for its app with
nothing unsent (parking.py), is never displaced. Called with the worker's lock held.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.server.worker.connection import Conn

#: How long a connection that has just connected, or been answered, is spared.
IDLE_GRACE = 1.0


def progress(conn: Conn, now: float) -> tuple[float, float] | None:
    """How fast `conn` is going (bytes a second, then since when: the least goes first); None
    when it is not to be displaced."""
    if conn.busy:
        return None
    if conn.lingering:
        return (-1.0, conn.deadline)
    outgoing = conn.outgoing
    if outgoing.out is not None or outgoing.body is not None:  # a reader: the bytes it has taken
        return (outgoing.sent / max(now - outgoing.started, 0.001), outgoing.started)
    if conn.parked is not None:
        return None  # a watcher waiting for its app
    if conn.reading_request:
        reader = conn.reader
        return (reader.received / max(now - reader.started, 0.001), reader.started)
    if conn.idle_since + IDLE_GRACE > now:  # just connected, or just answered: last of all
        return (float("inf"), conn.idle_since)
    return (0.0, conn.idle_since)


def least_progress(conns: Iterable[Conn], now: float, lingering: bool, spare: Conn | None) -> Conn | None:
    """The connection to displace first; a lingering one only if `lingering`; never `spare`."""
    victim, least = None, None
    for conn in conns:
        if (conn.lingering and not lingering) or conn is spare:
            continue
        going = progress(conn, now)
        if going is not None and (least is None or going < least):
            victim, least = conn, going
    return victim


def to_fit(conns: Iterable[Conn], held: int, budget: int, now: float) -> list[Conn]:
    """The connections holding bytes to displace, the least progress first, until the bytes
    held (`held` in all) fit in `budget`."""
    ranked = []
    for conn in conns:
        if conn.held:
            going = progress(conn, now)
            if going is not None:
                ranked.append((going, conn.fd, conn))
    ranked.sort()
    victims = []
    for _, _, conn in ranked:
        if held <= budget:
            break
        victims.append(conn)
        held -= conn.held
    return victims
