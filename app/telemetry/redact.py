"""What never reaches a log line: a watch ticket (app/auth/watch_tickets.py), marked by its prefix so that
it can be found in any text, a URL's query included.

A URL's query may hold it percent-encoded, whole or in part (`plwt%5F...`, even `%255F` when encoded
twice). The service refuses such a ticket, but decoded it is still good: every encoding is scrubbed.

Nor does a bearer token sent as RFC 6750 §2.3's `access_token` query parameter: the service never
reads one there (only the Authorization header), but the token a client put in its URL is good.
Nor any other value of a `ticket` parameter: a page whose EventSource cannot send a header may put
its token there, where the ticket goes; it is refused, but the token is good.
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
#: A `ticket` parameter's value that is not a ticket (a ticket is scrubbed by `_TICKET` first; a
#: value that only starts as one, `plwt_...~token`, is redacted whole).
_TICKET_PARAMETER = re.compile(
    r"(?<![^?&;\s])(ticket=)(?!" + re.escape(SCRUBBED) + r"(?:[&#\s\"]|$))[^&#\s\"]*", re.IGNORECASE
)


def holds_secret(text: str) -> bool:
    """Whether `text` may show a ticket, or an `access_token` or `ticket` parameter (cheap when it
    has neither the ticket's prefix, nor a parameter's name, nor any `%`)."""
    lowered = text.lower()
    return (
        TICKET_PREFIX in text
        or "access_token=" in lowered  # as `_ACCESS_TOKEN` and nginx's map read it: in any case
        or "ticket=" in lowered
        or ("%" in text and (_TICKET.search(text) is not None or _ACCESS_TOKEN.search(text) is not None))
    )


def scrub(text: str) -> str:
    """`text` with every ticket, and every `access_token` and `ticket` parameter's value, replaced."""
    text = _ACCESS_TOKEN.sub(_PARAMETER_REDACTED, _TICKET.sub(SCRUBBED, text))
    return _TICKET_PARAMETER.sub(_PARAMETER_REDACTED, text)
