"""The WSGI environ (PEP 3333) of a request, built from the parser's one reading of it.

It has the keys gunicorn's own environ has that the service, Werkzeug and ProxyFix read. Where
this worker differs, on purpose:

- a chunked body is decoded before the app runs, so the app sees its `CONTENT_LENGTH` and no
  `Transfer-Encoding` field;
- a header field whose name has an underscore is dropped (gunicorn's default `header_map`), so
  `X_Forwarded_For` can never pass for `X-Forwarded-For`.
"""

from __future__ import annotations

import io
import ipaddress
import os
import sys
from typing import Any, Literal
from urllib.parse import unquote_to_bytes

import gunicorn
import httptools
from gunicorn.http.wsgi import FileWrapper

from app.server.worker.connection import Conn
from app.server.worker.interface import PARKING
from app.server.worker.reader import Refusal, Request

SERVER_SOFTWARE = f"gunicorn/{gunicorn.__version__}"
_SPECIAL = {b"CONTENT_TYPE": "CONTENT_TYPE", b"CONTENT_LENGTH": None, b"TRANSFER_ENCODING": None}


class EnvironBuilder:
    """Builds environs for one worker: what is the same for each request is worked out once."""

    def __init__(self, cfg: Any, multithread: bool) -> None:
        self.script_name = os.environ.get("SCRIPT_NAME", "")
        self.static = {
            "SERVER_SOFTWARE": SERVER_SOFTWARE,
            "SCRIPT_NAME": self.script_name,
            "wsgi.version": (1, 0),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": multithread,
            "wsgi.multiprocess": cfg.workers > 1,
            "wsgi.run_once": False,
            "wsgi.input_terminated": True,
            # A file answered through it is sent with os.sendfile, never held (answer.py).
            "wsgi.file_wrapper": FileWrapper,
            PARKING: True,
        }
        self.trusted = _trusted_peers(cfg.forwarded_allow_ips)
        # gunicorn's secure_scheme_headers, as environ keys: from a trusted peer, they set the scheme.
        self.scheme_fields = {
            "HTTP_" + name.upper().replace("-", "_"): value.lower()
            for name, value in (cfg.secure_scheme_headers or {}).items()
        }

    def base(self, conn: Conn) -> dict[str, Any]:
        """What every request of `conn` shares."""
        environ = dict(self.static)
        client, server = conn.client, conn.server
        if isinstance(client, tuple):
            environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = client[0], str(client[1])
        else:  # a unix socket
            environ["REMOTE_ADDR"] = client.decode() if isinstance(client, bytes) else str(client or "")
        if isinstance(server, tuple):
            environ["SERVER_NAME"], environ["SERVER_PORT"] = str(server[0]), str(server[1])
        else:
            environ["SERVER_NAME"], environ["SERVER_PORT"] = str(server), "80"
        environ["wsgi.url_scheme"] = "http"
        return environ

    def trusts(self, client: Any) -> bool:
        """Whether the peer may set the scheme (gunicorn's forwarded_allow_ips)."""
        trusted = self.trusted
        return trusted is True or (
            isinstance(client, tuple) and any(_within(client[0], net) for net in trusted)
        )

    def build(self, conn: Conn, request: Request) -> dict[str, Any]:
        base = conn.environ_base
        if base is None:
            base = self.base(conn)
            conn.keep_environ(base, self.trusts(conn.client))
        environ = base.copy()
        url = request.url
        if url[:1] == b"/":
            path, _, query = url.partition(b"?")
            query = query.partition(b"#")[0]
        elif url == b"*":
            path, query = b"*", b""
        else:  # absolute-form (RFC 9112 section 3.2.2)
            try:
                parsed = httptools.parse_url(url)
            except httptools.HttpParserInvalidURLError:
                raise Refusal(400, "Bad Request", "Bad Request: the request target is no URI.") from None
            path, query = parsed.path or b"/", parsed.query or b""
        path_info = (unquote_to_bytes(path) if b"%" in path else path).decode("latin-1")
        if self.script_name and path_info.startswith(self.script_name):
            path_info = path_info[len(self.script_name) :]
        environ["REQUEST_METHOD"] = request.method
        environ["RAW_URI"] = url.decode("latin-1")
        environ["PATH_INFO"] = path_info
        environ["QUERY_STRING"] = query.decode("latin-1")
        environ["SERVER_PROTOCOL"] = "HTTP/1.1" if request.http == "1.1" else "HTTP/1.0"
        body = request.body
        environ["wsgi.input"] = io.BytesIO(body)
        if body:
            environ["CONTENT_LENGTH"] = str(len(body))
        for name, value in request.fields:
            if b"_" in name:
                continue
            key = name.upper().replace(b"-", b"_")
            text = value.decode("latin-1")
            if key in _SPECIAL:
                special = _SPECIAL[key]
                if special is not None:
                    environ[special] = text
                elif key == b"CONTENT_LENGTH" and not body:
                    environ["CONTENT_LENGTH"] = text
                continue
            field = "HTTP_" + key.decode("latin-1")
            environ[field] = f"{environ[field]},{text}" if field in environ else text
        if conn.trusted_peer:
            self._scheme(environ)
        return environ

    def _scheme(self, environ: dict[str, Any]) -> None:
        for field, secure in self.scheme_fields.items():
            value = environ.get(field)
            if value is not None:
                environ["wsgi.url_scheme"] = "https" if value.lower() == secure else "http"


def _trusted_peers(setting: Any) -> Literal[True] | list[Any]:
    """True for every peer ('*'); else the addresses and networks named."""
    names = [name.strip() for name in (setting or []) if name and name.strip()]
    if "*" in names:
        return True
    networks = []
    for name in names:
        try:
            networks.append(ipaddress.ip_network(name, strict=False))
        except ValueError:
            continue  # gunicorn's own check refuses it at start
    return networks


def _within(address: str, network: Any) -> bool:
    try:
        return ipaddress.ip_address(address) in network
    except ValueError:
        return False
