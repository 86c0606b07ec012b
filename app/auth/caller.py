"""An authenticated caller: what it may do, and the key its rate limit counts under; and the
request's own, which the plants blueprint's guard keeps on `g` (`keep`) for the views to read
(`current_caller`) instead of authenticating again."""

from __future__ import annotations

import math
from typing import NamedTuple

from flask import g
from werkzeug.exceptions import HTTPException


class Caller(NamedTuple):
    """Built once per static token, and once per verified JWT (then cached with it)."""

    #: The rate limit's key: a static token itself (it may carry its own limit), or a JWT's
    #: issuer and subject, so that a client's fresh tokens share one budget.
    limit_key: bytes
    #: The refusal of a read, or None when the caller may read.
    read_refusal: HTTPException | None
    #: The refusal of a write (create, delete), or None when the caller may write.
    write_refusal: HTTPException | None
    #: The refusal of every /webhooks operation, or None when the caller may manage webhooks.
    webhooks_refusal: HTTPException | None
    #: The kind of token, for the log: `full-access`, `read-only` (static tokens), `jwt` or
    #: `ticket` (a watch ticket, app/auth/watch_tickets.py).
    kind: str = "full-access"
    #: When its authority ends, in Unix seconds: a JWT's `exp`, a watch ticket's expiry; never for
    #: a static token. A watch of the feed ends then (app/watch/watches.py).
    expires: float = math.inf


#: An authentication's outcome: the refusal, or None and the caller.
Authentication = tuple[HTTPException | None, Caller | None]


def keep(caller: Caller) -> None:
    """The request's caller, as the guard authenticated it (a token's, or a watch ticket's)."""
    g.plants_caller = caller


def current_caller() -> Caller:
    """The request's caller: asked by a view behind a token, which the guard let in."""
    found: Caller = g.plants_caller
    return found
