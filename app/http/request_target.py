"""The host a request names, and `OPTIONS *`, as RFC 9112 and RFC 9110 read them, whichever server
runs the app (the packaged worker, gunicorn's gthread, `flask run`): each hands the app the request
line and `Host` as sent, and none checked them.

- The host is the request target's authority when the request line is in absolute form
  (`GET http://b.example/plants`): RFC 9112 section 3.2.2 has a server ignore `Host` then. It was
  `Host`'s, so the URLs handed out (`Location`, `Link`) named another host
  than the one the client asked. Every server puts the target as sent in the environ (`RAW_URI`,
  or `REQUEST_URI` where only that is set).
- A host that is no `uri-host [":" port]` (RFC 3986 section 3.2.2: a name of its unreserved,
  sub-delims and percent-encoded characters, an IPv4 address or a bracketed IP literal; a port of
  digits) is the JSON 400 RFC 9112 section 3.2 asks for, as is an HTTP/1.1 request without `Host`
  (the packaged worker's own 400 already), and so is a `Host` with a comma: RFC 3986's reg-name
  allows one, no DNS name has one, and gunicorn 23 and Werkzeug hand two `Host` fields on joined by
  a comma (the packaged worker refuses two, gunicorn 27's parser too). `Host: a b` was served,
  its links made relative. The answer never quotes the value, which may be 8 KB. A name RFC 3986
  allows and Werkzeug builds no URL on (`plant_store`, a port past 65535) is still served with
  path-absolute links (links.py).
- `OPTIONS *` asks what the server as a whole supports (RFC 9110 section 9.3.7): 204 with an
  `Allow` of every method some route serves, no token needed, as `OPTIONS` on a route (options.py).
  It was a 404: `*` is no path.
- A `Transfer-Encoding` or `Expect` the packaged worker's parser refuses is refused here too, on
  every path (head_fields.py).

This middleware is the standalone app's, outside ProxyFix, so what a trusted proxy forwards is
checked there (client_address.py) and the peer's values it keeps are these.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from flask import Flask

from app.http import head_fields
from app.http.options import no_content

_NAME = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*"
_FUTURE = r"\[[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+\]"
#: RFC 3986's host and port: an IPv6 literal (its address checked after), an IPvFuture one, or a
#: reg-name (an IPv4 address is one too), then an optional port of digits.
_HOST = re.compile(rf"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|{_FUTURE}|{_NAME})(?::[0-9]*)?").fullmatch
#: The order Allow names methods in, as each route's OPTIONS does.
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
_ONE_HOST = "The request needs one Host field (RFC 9112 section 3.2)"
_NEEDS = "a name, an IPv4 address or a bracketed IP address, then optionally ':' and a port's digits"


def valid_host(value: str) -> bool:
    """Whether `value` is RFC 3986's `host [":" port]`."""
    match = _HOST(value)
    if match is None:
        return False
    if match["v6"] is not None:
        try:
            ipaddress.IPv6Address(match["v6"])
        except ValueError:
            return False
    return True


def _authority(target: str) -> str | None:
    """The authority of an absolute-form `target` (`http://b.example/x`), or None for any other."""
    scheme, sep, rest = target.partition("://")
    if not sep or not scheme or scheme[0] in "/*":
        return None
    return re.split(r"[/?#]", rest, maxsplit=1)[0]


class RequestTarget:
    """WSGI middleware of the standalone app, outside ProxyFix: the host a request names and the
    framing and expectation fields, checked, and `OPTIONS *` answered."""

    def __init__(self, app: Callable[..., Iterable[bytes]], flask_app: Flask) -> None:
        self.app = app
        self.flask_app = flask_app
        self._allow: str | None = None
        #: The last host found valid: a client (a proxy) sends the same one on every request,
        #: which then costs one comparison rather than the pattern's match.
        self._valid = ""

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST")
        if host is not None and host != self._valid and "," in host:
            # Two fields, as gunicorn 23 and Werkzeug join them (a DNS name has no comma): the
            # packaged worker's 400, an absolute request line's authority notwithstanding.
            return _refused(f"{_ONE_HOST}: a comma in it reads as two.", start_response)
        target = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
        if target[:1] != "/" and target != "*":
            authority = _authority(target)
            if authority is not None:
                if not authority or not valid_host(authority):  # RFC 9110 section 4.2.1: no empty host
                    return _refused(
                        f"The request target's authority is not a host: {_NEEDS}.", start_response
                    )
                environ["HTTP_HOST"] = host = authority
        if host != self._valid:
            if host is not None and valid_host(host):
                if "," not in host:  # an absolute line's authority: a later `Host` so is refused
                    self._valid = host
            elif host is not None:
                return _refused(f"The Host header is not a host: {_NEEDS}.", start_response)
            elif environ.get("SERVER_PROTOCOL") == "HTTP/1.1":
                return _refused(f"{_ONE_HOST}.", start_response)
        if ("HTTP_TRANSFER_ENCODING" in environ or "HTTP_EXPECT" in environ) and (
            refused := head_fields.refusal(environ)
        ) is not None:
            return _refused(refused[1], start_response, refused[0])
        if target == "*" and environ.get("REQUEST_METHOD") == "OPTIONS":
            response = no_content()
            response.headers["Allow"] = self.allow()
            return response(environ, start_response)
        return self.app(environ, start_response)

    def allow(self) -> str:
        """Every method a route of the app serves, as its OPTIONS views name them."""
        if self._allow is None:
            served = {
                method
                for view in self.flask_app.view_functions.values()
                for method in getattr(view, "allow", "").split(", ")
            }
            self._allow = ", ".join([*(method for method in _METHODS if method in served), "OPTIONS"])
        return self._allow


def _refused(
    message: str, start_response: Callable[..., Any], status: str = head_fields.BAD_REQUEST
) -> Iterable[bytes]:
    """The JSON Error (a 400 unless `status` says), answered here: the app, its routes and its hooks
    never see the request."""
    body = orjson.dumps({"error": int(status[:3]), "message": message}, option=orjson.OPT_APPEND_NEWLINE)
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
