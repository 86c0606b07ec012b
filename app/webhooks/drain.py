"""One endpoint's drain: while its lease is held, the feed's events after its position, sent in
order, each outcome stored with the endpoint (the position and the attempt in one atomic step,
which also renews the lease). The deliverer (deliverer.py) decides which endpoints drain, and runs
each drain in a thread of its pool.
"""

from __future__ import annotations

import logging
import threading
import time

from app.store import EVENT_TYPES, FeedEntry, FeedExpiredError, PlantStore
from app.store.endpoints import ENABLED, Endpoint, delivery_fields
from app.webhooks.event_attempt import Delivering, attempt_event
from app.webhooks.keepalive import Slot
from app.webhooks.message import message_id, payload, signed_headers
from app.webhooks.outcomes import after_failure, attempt_record, count_attempt, epoch_ms, outcome_record
from app.webhooks.sender import WITHDRAWN, Attempt

log = logging.getLogger(__name__)

#: How long a lease lasts unless renewed: the most a dead process keeps an endpoint from others.
LEASE_MS = 10_000
#: Events read from the feed at once.
BATCH = 100
#: How often a failed attempt's outcome is decided again when the API changed its endpoint
#: meanwhile, before it is stored as last decided (`EndpointDrain._failed`).
DECISIONS = 5


#: The reason an endpoint that fell out of the feed's retention gives (`EndpointDrain._expired`).
EXPIRED_REASON = (
    "Events were lost: the endpoint fell behind the feed's retention, and resumed from the oldest event kept."
)


class EndpointDrain:
    """One endpoint's deliveries while its lease is held: until it has caught up with the feed, an
    attempt failed (the next is scheduled), or the endpoint changed under it."""

    def __init__(self, deliverer: Delivering, endpoint: Endpoint, slot: Slot | None = None) -> None:
        self.deliverer = deliverer
        self.endpoint = endpoint
        #: The endpoint's kept-alive connection, held for the drain's length.
        self.slot = slot
        self.position = endpoint.position
        #: The position last stored: `position` may run ahead of it over events not subscribed to.
        self.acked = endpoint.position
        self.tries = endpoint.tries
        #: Whether the last attempt was slow (lanes.py).
        self.slow = False
        #: When the drain began (monotonic): it gives its thread up after a turn (lanes.py).
        self.began = time.monotonic()
        #: The pool's thread it runs in (made there), whose attempts `withdraw` cuts off.
        self.thread = threading.get_ident()
        #: Set by `withdraw`: the endpoint moved under the drain, which ends without storing.
        self.withdrawn = False

    @property
    def over(self) -> bool:
        return self.withdrawn or self.deliverer.stopping

    def withdraw(self) -> None:
        """The endpoint was moved under this drain (a new URL, a replay, a resume: its epoch), so
        nothing it sends would be stored: its attempt in flight is cut off at once, rather than
        holding the lease, and the event back from the endpoint's next drain, for as long as
        the old receiver takes to answer. Called from the coordinator's thread."""
        self.withdrawn = True
        self.deliverer.watchdog.cut(self.thread)

    def run(self) -> None:
        store = self.deliverer.store
        while not self.over:
            try:
                # The events a store lost after they were delivered are not sent again, nor the
                # whole feed with them: read on from the position's time.
                entries, end = store.feed_entries(self.position, BATCH, read_on=True)
            except (FeedExpiredError, ValueError):
                if not self._expired():
                    return
                continue
            for entry in entries:
                if self.over:
                    return
                if not subscribed(self.endpoint, entry):
                    self.position = entry.position
                    continue
                # Events passed over are stored first, before an event after them is sent; False:
                # the endpoint changed, and the feed is read again from where deliveries stand.
                passed = pass_over(self, self.position)
                if passed is False:
                    break
                if passed is None or not self._deliver(entry):
                    return
            else:
                # Events it is not subscribed to, or none at all from the oldest kept: store where it is.
                passed = pass_over(self, end)
                if passed is None or (passed and len(entries) < BATCH):
                    return

    def _deliver(self, entry: FeedEntry) -> bool:
        """Send one event; True when it was delivered and the drain may go on."""
        deliverer, endpoint = self.deliverer, self.endpoint
        msg_id = message_id(entry)
        try:
            body = payload(entry.event)
            headers = signed_headers(msg_id, body, signing_secrets(endpoint), deliverer.user_agent)
        except Exception as exc:
            # A stored secret the signer refuses, say: a failed attempt, retried on schedule.
            log.warning("Webhooks: could not sign %s for %s (%s)", msg_id, endpoint.id, type(exc).__name__)
            outcome = Attempt(None, "internal", None, 0)
        else:
            outcome, self.slow = attempt_event(deliverer, endpoint, self.slot, entry, msg_id, body, headers)
            if (
                outcome.error == WITHDRAWN
                or self.withdrawn
                or (outcome.error is not None and deliverer.cutting_off)
            ):
                # Withdrawn, or cut off by the process's stop (Deliverer.stop): not the receiver's
                # failure, so no retry is scheduled; the next process sends it at once. An attempt
                # that failed on its own while the process stops is recorded as any other.
                return False
        count_attempt(deliverer.metrics, outcome, entry.event.time_ms)
        attempt = outcome_record(msg_id, outcome)
        if outcome.delivered:
            self.position, self.tries = entry.position, 0
            # After a slow attempt, or its turn over while others wait for a thread, the drain
            # gives its thread up till its next turn in its lane (lanes.py): receivers answering
            # just under the slow threshold, with a backlog, would else keep the fast lane's
            # threads for as long as writes come faster than they answer.
            acked = self._ack(delivery_fields(entry.position, 0, 0), attempt)
            lanes = deliverer.lanes
            turn_over = lanes.contended and time.monotonic() - self.began >= lanes.turn_s
            return acked and not self.slow and not turn_over
        self.tries += 1
        return self._failed(entry, msg_id, outcome, attempt)

    def _failed(self, entry: FeedEntry, msg_id: str, outcome: Attempt, attempt: str) -> bool:
        """Store a failed attempt as decided from the endpoint as read, and only while its revision
        is still that one: a change through the API meanwhile has it read again and decided anew.
        Its retry (or failing, or disabled); or, when it no longer lists the event's type (a PATCH
        while it was sent, which asked for it to be skipped at once, the last attempt's too), the
        event skipped. True when the drain may go on."""
        deliverer, scale = self.deliverer, self.deliverer.settings.webhooks_retry_scale
        for left in reversed(range(DECISIONS)):
            endpoint = self.endpoint
            listed = subscribed(endpoint, entry)
            position = self.position if listed else entry.position
            fields = after_failure(msg_id, outcome, position, self.tries, scale, listed=listed)
            # The last decision is stored whatever changed, so that the attempt is recorded.
            rev = endpoint.rev if left else None
            answer = deliverer.store.endpoints.ack(
                endpoint.id, deliverer.owner, LEASE_MS, endpoint.epoch, fields, attempt, rev
            )
            if answer is None:
                return False
            if answer.stored:
                self.position = self.acked = position
                if listed:
                    return False
                self.tries = 0
                # A slow attempt still ends the drain's turn (lanes.py).
                return answer.status == ENABLED and not self.slow
            if not self.read_again():
                return False
        return False

    def _expired(self) -> bool:
        """The position fell out of the feed's retention: say so, and go on from the oldest kept."""
        self.position, self.tries = None, 0
        attempt = attempt_record(None, None, "expired", 0)
        return self._ack({**delivery_fields(None, 0, 0), "reason": EXPIRED_REASON}, attempt)

    def _ack(self, fields: dict[str, str], attempt: str | None) -> bool:
        """Store an outcome; True when the drain may go on (the lease held, the endpoint enabled)."""
        deliverer, endpoint = self.deliverer, self.endpoint
        answer = deliverer.store.endpoints.ack(
            endpoint.id, deliverer.owner, LEASE_MS, endpoint.epoch, fields, attempt
        )
        if answer is None:
            return False
        self.acked = self.position
        if answer.status != ENABLED:
            return False
        # Changed through the API meanwhile (its URL, events or secrets): read again.
        return answer.rev == endpoint.rev or self.read_again()

    def read_again(self) -> bool:
        """The endpoint read again after a change through the API; False when it is gone or its
        epoch moved (the drain's outcomes would no longer be stored)."""
        endpoint = self.endpoint
        fresh = self.deliverer.store.endpoints.get(endpoint.id)
        if fresh is None or fresh.epoch != endpoint.epoch:
            return False
        self.endpoint = fresh
        return True


def pass_over(drain: EndpointDrain, position: bytes | None) -> bool | None:
    """Store that `drain` passed to `position` over events of types its endpoint does not take,
    only while the endpoint's revision is still the one that decided it: a PATCH meanwhile may
    list them now, and the events after where the deliveries stood when it landed go by its types
    (those written after it above all). True when stored (or nothing to store); False when the
    endpoint changed, read again, the drain back where the deliveries stand; None when the drain
    ends."""
    drain.position = position
    if position == drain.acked:
        return True
    deliverer, endpoint = drain.deliverer, drain.endpoint
    fields = delivery_fields(position, 0, 0)
    answer = deliverer.store.endpoints.ack(
        endpoint.id, deliverer.owner, LEASE_MS, endpoint.epoch, fields, None, endpoint.rev
    )
    if answer is None or answer.status != ENABLED:
        return None
    if answer.stored:
        drain.acked = position
        return True
    drain.position = drain.acked
    return False if drain.read_again() else None


def subscribed(endpoint: Endpoint, entry: FeedEntry) -> bool:
    """Whether `endpoint` takes `entry`'s kind of event."""
    events = endpoint.events
    return events is None or EVENT_TYPES[entry.event.kind] in events


def holds_listed(store: PlantStore, endpoint: Endpoint, changed: Endpoint) -> bool:
    """Whether the event `endpoint`'s retry holds (the first after its position that it takes) is
    of a type `changed` still takes; False when the feed no longer has it (the drain says so)."""
    try:
        entries, _ = store.feed_entries(endpoint.position, BATCH, read_on=True)
    except (FeedExpiredError, ValueError):
        return False
    held = next((entry for entry in entries if subscribed(endpoint, entry)), None)
    return held is not None and subscribed(changed, held)


def signing_secrets(endpoint: Endpoint) -> list[str]:
    """The secrets that sign `endpoint`'s deliveries now: a rotated one until it expires."""
    now = epoch_ms()
    return [secret for secret, until in endpoint.secrets if until is None or until > now]
