"""What a cache may do with an answer of the plants blueprint (RFC 9111), and which request
headers its form depends on (`Vary`, RFC 9110 §12.5.5).

A GET's or HEAD's answer behind a token is `private, no-cache`: a shared cache must not keep it
(nginx's proxy_cache, for one, keeps an answer to a request with `Authorization` unless told not
to, and a watch ticket comes in the URL, without that header), and a browser's cache asks again
each time, where an ETag makes the answer a 304. A stream of the feed is one of them. An answer
that holds a credential (a signing secret, a watch ticket) sets its own `no-store`, which is not
replaced. The public answers (the document, the page, OPTIONS, the 405s) are the same for every
caller and are left to the cache's own rules.
"""

from __future__ import annotations

from flask import Response

#: The methods whose answers a cache keeps (RFC 9111 §3: a POST's only with explicit freshness,
#: which no answer here has): the others' answers need no Cache-Control, and are spared its cost.
KEPT_METHODS = frozenset({"GET", "HEAD"})
#: The Cache-Control of an answer behind a token that sets none of its own.
GUARDED = "private, no-cache"


def finish(response: Response, *, own: bool, negotiated: bool) -> None:
    """Add to an answer behind a token `Cache-Control`, unless it is of a view that may set its
    `own` and did, and `Vary: Accept` to a `negotiated` one (its form, a page or a stream, is
    chosen by `Accept`). Added, not merged: nothing else in the blueprint sends these but
    app/http/cors.py's own `Vary`. Only an `own` answer is looked through (Werkzeug's look-up of
    a header it does not find raises and catches a KeyError: a cost on every answer)."""
    if not own or "Cache-Control" not in response.headers:
        response.headers.add("Cache-Control", GUARDED)
    if negotiated:
        response.headers.add("Vary", "Accept")
