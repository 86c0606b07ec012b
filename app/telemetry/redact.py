"""What never reaches a log line: a watch ticket (app/auth/watch_tickets.py), marked by its prefix so that
it can be found in any text, a URL's query included.

A URL's query may hold it percent-encoded, whole or in part (`plwt%5F...`, even `%255F` when encoded
twice). The service refuses such a ticket, but decoded it is still good: every encoding is scrubbed.

Nor does a bearer token sent as RFC 6750 §2.3's `access_token` query parameter: the service never
reads one there (only the Authorization header), but the token a client put in its URL is good.
Nor any other value of a `ticket` parameter: a page whose EventSource cannot send a header may put
its token there, where the ticket goes; it is refused, but the token is good.

Nor the value of any parameter the service does not define, under whatever name a client invents
(`?token=`, `?api_key=`, `?%61fter=`): a log cannot tell a token from a cache-buster, and the
service never reads them, so nothing an operator needs is lost. Its own parameters (`READABLE`,
spelled as the service reads them) stay readable: ids, cursors, tags and numbers. Nor any other
name without a value (`?s3cr3t`, or `?s3cr3t=` as a client's URLSearchParams writes it): a client
may send its token as a bare word, and the name is then the secret; it is written `[redacted]`.
In free text a bare word counts only in a URL's query, after a word with a `/` (`/plants?s3cr3t`),
not after a sentence's `?`. Nor a request target's fragment (`#...`), which no server reads as the
query, whole. deploy/nginx-plants.conf applies the same rule.
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
#: Not one already scrubbed: a line that two filters read (Werkzeug's logger's, then a root
#: handler's) says `plwt_[redacted]` once.
_TICKET = re.compile(
    "".join(map(_literal_or_encoded, TICKET_PREFIX)) + rf"(?!\[redacted\])(?:[A-Za-z0-9_-]|{_ENCODED})*",
    re.IGNORECASE,
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

#: The query parameters the service defines (`GET /plants`, `GET /events`) whose values a log may
#: show; `ticket` is one, but a credential. Any other parameter's value is redacted.
READABLE = frozenset({"after", "limit", "tags", "wait", "ids", "types", "bookmarks", "snapshot"})
REDACTED = "[redacted]"
#: A URL's query in any text (a log message names a request's URI), up to a space, quote or fragment,
#: and the word it follows, read from the word's start (possessively: a long word is read once).
_QUERY = re.compile(r"(?:(?<![^\s\"])([^\s\"?#]*+))?\?([^\s\"#]+)")
#: A query's parameters: `&` separates them, and `;` too, as some servers read it, and here a `?`
#: (a URL with a query given another: `?s3cr3t?limit=5`, `?limit=5?s3cr3t`), so that a part after
#: one is never left out as part of a readable value, nor shown as a readable value's name.
_SEPARATOR = re.compile("([&;?])")
_PARTS = re.compile("[&;?]")
#: The parts without `=` a log may show: the service's own names, an empty part, one redacted.
_SHOWN_BARE = READABLE | {"", REDACTED, SCRUBBED}


def _unreadable(part: str) -> bool:
    """Whether a query's part is a parameter a log may not show as sent: its value, or the whole of
    a part without one (any name but the service's own may be a client's token)."""
    name, equals, value = part.partition("=")
    if not equals:
        return part not in _SHOWN_BARE
    return name not in READABLE and value != REDACTED and value != SCRUBBED


def _unreadable_value(part: str) -> bool:
    """Whether a query's part is a parameter with a value a log may not show."""
    return "=" in part and _unreadable(part)


def _holds_unreadable(query: str, in_url: bool = True) -> bool:
    """Whether `query` (without its `?`) holds a part a log may not show; `in_url` False for a `?`
    in free text that follows no URL's path, where only a value is looked for."""
    return any(map(_unreadable if in_url else _unreadable_value, _PARTS.split(query)))


def _redact_unreadable(query: str, in_url: bool = True) -> str:
    """`query` (without its `?`) with each unreadable parameter's value replaced, and each name
    without a value (`in_url`, as `_holds_unreadable`)."""
    parts = _SEPARATOR.split(query)
    unreadable = _unreadable if in_url else _unreadable_value
    for index in range(0, len(parts), 2):  # the odd ones are the separators
        if unreadable(part := parts[index]):
            name, _, value = part.partition("=")
            # `name=` is a name without a value too (in a URL: free text's `?db=` stays a name).
            parts[index] = name + "=" + REDACTED if value or not in_url else REDACTED
    return "".join(parts)


def _in_url(query: re.Match[str]) -> bool:
    """Whether a `_QUERY` found in free text follows a URL's path: a word with a `/`."""
    return "/" in (query.group(1) or "")


def query_holds_secret(query: str) -> bool:
    """Whether a URL's query (without its `?`) may show a secret (cheap when it is empty)."""
    return bool(query) and (holds_secret(query) or _holds_unreadable(query))


def scrub_query(query: str) -> str:
    """A URL's query (without its `?`) as a log may show it."""
    return _redact_unreadable(scrub(query))


def scrub_uri(uri: str) -> str:
    """A request's target (`RAW_URI`, a span's `http.target`) as a log may show it: its query is
    everything after the first `?`, whatever it holds (a `"` ends a query in free text, not here),
    and a fragment, which the service never reads but a client may put a token in, is never shown."""
    target, hash_mark, fragment = uri.partition("#")
    path, question_mark, query = target.partition("?")
    return (
        scrub(path)
        + question_mark
        + (scrub_query(query) if query else "")
        + (hash_mark + REDACTED if fragment else hash_mark)
    )


def uri_holds_secret(uri: str, query: str) -> bool:
    """Whether a request's target may show a secret, `query` being its query as the server read it
    (which a fragment is not part of)."""
    return query_holds_secret(query) or "#" in uri


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
        or (
            "?" in text
            and any(_holds_unreadable(query[2], _in_url(query)) for query in _QUERY.finditer(text))
        )
    )


def scrub(text: str) -> str:
    """`text` with every ticket, every `access_token` and `ticket` parameter's value, and in a URL's
    query every value a log may not show, replaced."""
    text = _ACCESS_TOKEN.sub(_PARAMETER_REDACTED, _TICKET.sub(SCRUBBED, text))
    text = _TICKET_PARAMETER.sub(_PARAMETER_REDACTED, text)
    return _QUERY.sub(_scrub_query_in_text, text) if "?" in text else text


#: A request line's target in a log line (`GET /events?ticket=... HTTP/1.1`), as Werkzeug's
#: development server writes each request and gunicorn names a request it could not read.
_REQUEST_TARGET = re.compile(r"(?<=[A-Z] )\S+(?= HTTP/\d)")


def scrub_line(text: str) -> str:
    """`text` as a log may show it: a request line's target as the access log shows it (`scrub_uri`:
    its fragment, and any quote in its query, too), the rest as `scrub`."""
    parts, last = [], 0
    for target in _REQUEST_TARGET.finditer(text):
        parts += [scrub(text[last : target.start()]), scrub_uri(target.group())]
        last = target.end()
    return "".join(parts) + scrub(text[last:])


def _scrub_query_in_text(query: re.Match[str]) -> str:
    return (query.group(1) or "") + "?" + _redact_unreadable(query.group(2), _in_url(query))
