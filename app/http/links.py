"""The URLs the service hands out (a create's `Location`, a page's `Link`): absolute, on the
request's host (the app's `SERVER_NAME` where it sets one), scheme and prefix (forwarded ones
where trusted: app/http/client_address.py).

A `Host` that Werkzeug builds no URL on (an underscore, as in a compose file's `plant_store`, or a
port past 65535) reads as no host at all, and the URL came out `http:///plants/1`, which reaches
nothing. Such a request is handed a path-absolute reference instead (`/plants/1`), which a client
resolves against the URL it asked (RFC 3986 §5.2; RFC 9110 §10.2.2 allows it in `Location`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from flask import current_app, request, url_for

#: What Werkzeug keeps unquoted in a URL's path: a path segment's characters (WHATWG's), and `%`
#: for what is already quoted.
_PATH_SAFE = "!$&'()*+,/:;=@%"
#: How Werkzeug begins a URL with no host: the scheme, then the path straight after "//".
_HOSTLESS = ("http:///", "https:///")


def url_of(endpoint: str, **values: Any) -> str:
    """The URL of `endpoint` with `values`, as `url_for` builds it, absolute where it can be."""
    return _reference(url_for(endpoint, _external=True, **values))


def base_url() -> str:
    """This request's URL without its query, absolute where it can be: `request.base_url` as
    Werkzeug builds it, but left a URI. Werkzeug's is an IRI, its host's IDNA labels and its
    prefix's percent-encoded UTF-8 decoded (`xn--e1afmkfd.example`, `/caf%C3%A9`): in a header, a
    character past Latin-1 failed the answer (a 500), one within it was a byte no URL holds, and
    a label that is no IDNA (`xn--zz`, from a client's `Host`) raised as it was decoded (a 500).
    Where the app sets `SERVER_NAME` (a host app's own name), on that name, as `url_for` builds a
    `Location`: not on the `Host` the client sent."""
    # The app itself, not through its proxy: a proxy's attribute costs several times the lookup.
    if current_app._get_current_object().config["SERVER_NAME"] is not None:  # type: ignore[attr-defined]
        assert request.endpoint is not None  # a view's answer: the request was routed
        return url_of(request.endpoint, **(request.view_args or {}))
    root = quote(request.root_path.rstrip("/"), safe=_PATH_SAFE)
    path = quote(request.path.lstrip("/"), safe=_PATH_SAFE)
    return _reference(f"{request.scheme}://{request.host}{root}/{path}")


def _reference(url: str) -> str:
    """`url`, or its path where it names no host: read off the URL already built, since asking
    Werkzeug for the host again would parse and check it a second time on every such request."""
    for prefix in _HOSTLESS:
        if url.startswith(prefix):
            return url[len(prefix) - 1 :]
    return url
