"""What never reaches a log line: a watch ticket (app/auth/watch_tickets.py), marked by its prefix so that
it can be found in any text, a URL's query included.

A URL's query may hold it percent-encoded, whole or in part (`plwt%5F...`, even `%255F` when encoded
twice). The service refuses such a ticket, but decoded it is still good: every encoding is scrubbed.

Nor does a bearer token sent as RFC 6750 §2.3's `access_token` query parameter: the service never
reads one there (only the Authorization header), but the token a client put in its URL is good.
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


#: RFC 6750 §2.3's parameter, its underscore literal or encoded, and its value up to the next one.
_ACCESS_TOKEN = re.compile(r"(?<![^?&;\s])(access(?:_|%(?:25)*5F)token=)[^&#\s\"]*", re.IGNORECASE)
_PARAMETER_REDACTED = r"\1[redacted]"


def holds_secret(text: str) -> bool:
    """Whether `text` may show a ticket or an `access_token` parameter (cheap when it has neither
    the ticket's prefix, nor the parameter's name, nor any `%`)."""
    return (
        TICKET_PREFIX in text
        or "access_token=" in text.lower()  # as `_ACCESS_TOKEN` and nginx's map read it: in any case
        or ("%" in text and (_TICKET.search(text) is not None or _ACCESS_TOKEN.search(text) is not None))
    )


def scrub(text: str) -> str:
    """`text` with every ticket and every `access_token` parameter's value in it replaced."""
    return _ACCESS_TOKEN.sub(_PARAMETER_REDACTED, _TICKET.sub(SCRUBBED, text))
