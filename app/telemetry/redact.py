"""What never reaches a log line: a watch ticket (app/auth/watch_tickets.py), marked by its prefix so that
it can be found in any text, a URL's query included."""

from __future__ import annotations

import re

#: Every watch ticket starts with it.
TICKET_PREFIX = "plwt_"
_TICKET = re.compile(TICKET_PREFIX + r"[A-Za-z0-9_-]*")
SCRUBBED = TICKET_PREFIX + "[redacted]"


def scrub(text: str) -> str:
    """`text` with every ticket in it replaced."""
    return _TICKET.sub(SCRUBBED, text)
