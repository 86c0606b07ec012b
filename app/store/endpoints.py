"""Webhook endpoints, kept by the store beside the plants: what each is, and where its delivery stands.

An endpoint is a cursor on the change feed. The API writes its configuration (`update`, under a
revision check); a deliverer leases it (`lease`), sends the events after its position, and stores
each outcome with `ack`, which moves the position and records the attempt in one atomic step,
only while it still holds the lease and nobody has moved the position meanwhile (`epoch`).
Every backend keeps the same fields, as text: Redis keeps them in a hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple, Protocol

#: The attempts kept per endpoint, the latest first.
ATTEMPTS_KEPT = 100

ENABLED, DISABLED, FAILING = "enabled", "disabled", "failing"


@dataclass(frozen=True)
class Endpoint:
    """One endpoint. `position` None: from the oldest event the feed keeps."""

    id: str
    url: str
    events: tuple[str, ...] | None
    description: str
    created_ms: int
    #: The signing secrets, the newest first, each with when it stops signing (None: never).
    secrets: tuple[tuple[str, int | None], ...]
    status: str = ENABLED
    #: Why the status is what it is, or why deliveries skipped ahead; None when nothing to say.
    reason: str | None = None
    position: bytes | None = None
    #: Failed attempts of the event at the position, and when the next is due (ms since the epoch).
    tries: int = 0
    due_ms: int = 0
    #: Bumped by whatever moves the position other than a delivery (a replay, a resume).
    epoch: int = 0
    #: Bumped by every change through the API.
    rev: int = 0

    def config_text(self) -> str:
        return json.dumps(
            {
                "url": self.url,
                "events": self.events,
                "description": self.description,
                "created": self.created_ms,
                "secrets": self.secrets,
            },
            separators=(",", ":"),
        )

    def fields(self) -> dict[str, str]:
        """Every field as the stores keep it."""
        return {
            "config": self.config_text(),
            "status": self.status,
            "reason": self.reason or "",
            **delivery_fields(self.position, self.tries, self.due_ms),
            "epoch": str(self.epoch),
            "rev": str(self.rev),
        }

    @classmethod
    def from_fields(cls, endpoint_id: str, fields: dict[str, str]) -> Endpoint:
        config = json.loads(fields["config"])
        position = fields["position"]
        return cls(
            id=endpoint_id,
            url=config["url"],
            events=None if config["events"] is None else tuple(config["events"]),
            description=config["description"],
            created_ms=config["created"],
            secrets=tuple((secret, expires) for secret, expires in config["secrets"]),
            status=fields["status"],
            reason=fields["reason"] or None,
            position=None if position == "-" else bytes.fromhex(position),
            tries=int(fields["tries"]),
            due_ms=int(fields["due"]),
            epoch=int(fields["epoch"]),
            rev=int(fields["rev"]),
        )


#: The fields a delivery's outcome writes (`ack`), which moves no revision.
OUTCOME_FIELDS = ("status", "reason", "position", "tries", "due")


#: Where a delivery stands, but for its status: what only a delivery's outcome writes (or a replay).
STANDING_FIELDS = ("position", "tries", "due")


def outcome_as_read(read: Endpoint, fields: dict[str, str], overriding: bool = False) -> dict[str, str]:
    """What a change of `fields`, made from the endpoint as `read`, must find unchanged besides
    its revision, since an outcome stored meanwhile moves where its delivery stands under no
    revision:

    - nothing for a change of the configuration alone, which no outcome touches, nor for one
      `overriding` (a replay: it sets where the delivery stands whatever it was, and moves the
      epoch, so that no outcome of an attempt under way is stored after it);
    - where its delivery stands, for one that writes a retry's time (or a position) without
      moving the epoch: it decided it from the event a retry held, and would write it back over
      an outcome (an event delivered sent again, a failure's retry undone);
    - the status alone, for one that moves the epoch (a new URL, a resume: it resets the retry
      of whatever event the deliveries stand at, writing no position, and no outcome of an
      attempt under way is stored after it) or writes a status (disabled): it decided from the
      status read. An outcome changes the status at most once between two changes through the
      API (enabled to failing or disabled), so a busy endpoint holds such a change back one try
      at most, where its outcomes would hold back one that read them all."""
    written = fields.keys()
    if overriding or written.isdisjoint((*OUTCOME_FIELDS, "epoch")):
        return {}
    if "epoch" not in written and not written.isdisjoint(STANDING_FIELDS):
        kept = read.fields()
        return {name: kept[name] for name in OUTCOME_FIELDS}
    return {"status": read.status}


class Acked(NamedTuple):
    """What an acknowledgement found: the endpoint's status and revision after it, and whether it
    stored the outcome (False: the revision had moved from the one the outcome was checked
    against, a change through the API meanwhile, and nothing was stored)."""

    status: str
    rev: int
    stored: bool


def delivery_fields(position: bytes | None, tries: int, due_ms: int) -> dict[str, str]:
    """Where a delivery stands, as the stores keep it."""
    return {"position": "-" if position is None else position.hex(), "tries": str(tries), "due": str(due_ms)}


class EndpointStore(Protocol):
    """What the webhooks need of a store. Thread-safe; on Redis, shared by every process."""

    def add(self, endpoint: Endpoint, limit: int) -> bool:
        """Keep a new endpoint; False, keeping nothing, when `limit` endpoints are kept already."""
        ...

    def get(self, endpoint_id: str, until: float | None = None) -> Endpoint | None:
        """The endpoint, or None when it is gone. `until` (time.monotonic()): on a shared store, a
        StoreUnavailableError once it passes (where the client can bound a read)."""
        ...

    def all(self) -> list[Endpoint]:
        """Every endpoint, the oldest first."""
        ...

    def ids(self) -> list[str]: ...

    def update(self, read: Endpoint, fields: dict[str, str], *, overriding: bool = False) -> bool | None:
        """Write `fields` and bump the revision if the endpoint is still as `read`: its revision,
        and what it decided from of where its delivery stands (`outcome_as_read`), unless
        `overriding` (a change that sets where its delivery stands whatever it was: a replay).
        None when the endpoint is gone, False (writing nothing) when it changed since."""
        ...

    def remove(self, endpoint_id: str) -> bool: ...

    def attempts(self, endpoint_id: str) -> list[str]:
        """The attempts recorded (JSON texts), the latest first."""
        ...

    def lease(self, endpoint_id: str, owner: str, ttl_ms: int) -> Endpoint | None:
        """Take or renew the endpoint's lease for `owner`; the endpoint, or None when another
        owner holds it or it is gone."""
        ...

    def renew(self, endpoint_ids: list[str], owner: str, ttl_ms: int) -> list[bool]:
        """Renew `owner`'s leases, in one step; whether each is still held."""
        ...

    def release(self, endpoint_id: str, owner: str) -> None: ...

    def ack(
        self,
        endpoint_id: str,
        owner: str,
        ttl_ms: int,
        epoch: int,
        fields: dict[str, str],
        attempt: str | None,
        rev: int | None = None,
    ) -> Acked | None:
        """Store a delivery's outcome (`fields`, and the attempt, if any) in one atomic step and
        renew the lease; the endpoint's status and revision after it. None, storing nothing,
        when `owner` lost the lease, the endpoint is gone, or its epoch moved. A `status` or
        `reason` in `fields` is written only while the endpoint is enabled. Given `rev`, the
        outcome is stored only while the endpoint's revision is still `rev` (`Acked.stored`):
        one decided from the endpoint as it was then (its types, say)."""
        ...
