"""What never reaches a log line: a watch ticket (app/auth/watch_tickets.py), marked by its prefix so that
it can be found in any text, a URL's query included.

A URL's query may hold it percent-encoded, whole or in part (`plwt%5F...`, even `%255F` when encoded
twice). The service refuses such a ticket, but decoded it is still good: every encoding is scrubbed.
"""

from __future__ import annotations

import re

#: Every watch ticket starts with it.
TICKET_PREFIX = "plwt_"
SCRUBBED = TICKET_PREFIX + "[redacted]"


def _literal_or_encoded(char: str) -> str:
    """`char`, or its percent-encoding, itself encoded any number of times (`%5F`, `%255F`, ...)."""
    return f"(?:{re.escape(char)}|%(?:25)*{ord(char):02X})"


_ENCODED = r"%(?:25)*[0-9A-F]{2}"
_TICKET = re.compile(
    "".join(map(_literal_or_encoded, TICKET_PREFIX)) + rf"(?:[A-Za-z0-9_-]|{_ENCODED})*", re.IGNORECASE
)


def holds_ticket(text: str) -> bool:
    """Whether `text` may show a ticket (cheap when it has neither the prefix nor any `%`)."""
    return TICKET_PREFIX in text or ("%" in text and _TICKET.search(text) is not None)


def scrub(text: str) -> str:
    """`text` with every ticket in it replaced."""
    return _TICKET.sub(SCRUBBED, text)
