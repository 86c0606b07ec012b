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
    """`char`, or its percent-encoding (either case's, for a letter), itself encoded any number of
    times (`%5F`, `%255F`, ...)."""
    codes = "|".join(sorted({f"{ord(each):02X}" for each in (char.lower(), char.upper())}))
    return f"(?:{re.escape(char)}|%(?:25)*(?:{codes}))"


def _parameter(name: str) -> str:
    """A query parameter's name and its `=`, each character of the name literal or encoded: a server
    decodes the name (Werkzeug reads `%61ccess_token=` as `access_token`), and the value is as good."""
    return "(" + "".join(map(_literal_or_encoded, name)) + "=)"


_ENCODED = r"%(?:25)*[0-9A-F]{2}"
_TICKET = re.compile(
    "".join(map(_literal_or_encoded, TICKET_PREFIX)) + rf"(?:[A-Za-z0-9_-]|{_ENCODED})*", re.IGNORECASE
)


#: RFC 6750 §2.3's parameter, any of its characters literal or encoded, and its value up to the next one.
_ACCESS_TOKEN = re.compile(r"(?<![^?&;\s])" + _parameter("access_token") + r"[^&#\s\"]*", re.IGNORECASE)
_PARAMETER_REDACTED = r"\1[redacted]"
#: A `ticket` parameter's value that is not a ticket (a ticket is scrubbed by `_TICKET` first; a
#: value that only starts as one, `plwt_...~token`, is redacted whole).
_TICKET_PARAMETER = re.compile(
    r"(?<![^?&;\s])" + _parameter("ticket") + "(?!" + re.escape(SCRUBBED) + r"(?:[&#\s\"]|$))[^&#\s\"]*",
    re.IGNORECASE,
)

#: What a query with a `%` may hide: a ticket, or either parameter under a name with encoded characters.
_MAY_BE_ENCODED = (_TICKET, _ACCESS_TOKEN, _TICKET_PARAMETER)


def holds_secret(text: str) -> bool:
    """Whether `text` may show a ticket, or an `access_token` or `ticket` parameter (cheap when it
    has neither the ticket's prefix, nor a parameter's name, nor any `%`)."""
    lowered = text.lower()
    return (
        TICKET_PREFIX in text
        or "access_token=" in lowered  # as `_ACCESS_TOKEN` and nginx's map read it: in any case
        or "ticket=" in lowered
        or ("%" in text and any(pattern.search(text) is not None for pattern in _MAY_BE_ENCODED))
    )


def scrub(text: str) -> str:
    """`text` with every ticket, and every `access_token` and `ticket` parameter's value, replaced."""
    text = _ACCESS_TOKEN.sub(_PARAMETER_REDACTED, _TICKET.sub(SCRUBBED, text))
    return _TICKET_PARAMETER.sub(_PARAMETER_REDACTED, text)
