"""A real local identity provider for the JWT tests: OpenID Connect discovery and a JWKS over HTTP
on 127.0.0.1, keys made by `cryptography`, access tokens signed by PyJWT.

It can rotate its keys, go down (its port closed), hang (accept, then never answer in time),
trickle its answers (a byte at a time, each soon after the last), and count the fetches of each
document.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.threaded_http import serve_in_thread

AUDIENCE = "https://plants.example"
HANG_SECONDS = 6.0


@functools.lru_cache(maxsize=8)
def rsa_key(number: int) -> rsa.RSAPrivateKey:
    """RSA keys, made once per session (each takes tens of milliseconds)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class SigningKey:
    def __init__(self, kind: str = "RSA", kid: str | None = None, number: int | None = None) -> None:
        self.kind = kind
        self.kid = kid or uuid.uuid4().hex[:12]
        if kind == "RSA":
            self.private = rsa_key(number if number is not None else 0)
            self.algorithm = "RS256"
            self.jwk = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.algorithm = "ES256"
            self.jwk = json.loads(ECAlgorithm.to_jwk(self.private.public_key()))
        self.jwk.update(kid=self.kid, use="sig")


class Issuer:
    """The provider: `url` is its issuer; `fetches["jwks"]` counts the JWKS answers asked for."""

    def __init__(self) -> None:
        self.keys = [SigningKey("RSA", number=0), SigningKey("EC")]
        self.fetches: Counter[str] = Counter()
        self.cache_control: str | None = None
        self.hanging = False
        #: Seconds between the bytes of every answer, when set: each read finds one soon, the
        #: answer whole only long after.
        self.drip: float | None = None
        #: The discovery document's jwks_uri, when not the issuer's own /jwks.
        self.jwks_uri: str | None = None
        #: An answer's body in place of every document (a hostile or broken provider's).
        self.raw: bytes | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._serve()

    def _serve(self) -> None:
        serve_in_thread(self._server)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    issuer.fetches["discovery"] += 1
                    document = {"issuer": issuer.url, "jwks_uri": issuer.jwks_uri or f"{issuer.url}/jwks"}
                elif self.path == "/jwks":
                    issuer.fetches["jwks"] += 1
                    document = {"keys": [key.jwk for key in issuer.keys]}
                else:
                    self.send_error(404)
                    return
                if issuer.hanging:
                    time.sleep(HANG_SECONDS)
                body = json.dumps(document).encode() if issuer.raw is None else issuer.raw
                if issuer.drip is not None:
                    self._trickle(body, issuer.drip)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                # As providers publish discovery and keys: readable from any page (CORS).
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Length", str(len(body)))
                if issuer.cache_control:
                    self.send_header("Cache-Control", issuer.cache_control)
                self.end_headers()
                # A client that gave up on a hanging issuer has gone: its broken pipe is expected.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def _trickle(self, body: bytes, pause: float) -> None:
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    for byte in head.encode() + b"\r\n" + body:
                        self.wfile.write(bytes([byte]))
                        time.sleep(pause)
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def down(self) -> None:
        """Close the port: fetches are refused."""
        self._server.shutdown()
        self._server.server_close()

    def up(self) -> None:
        """Serve again on the same port."""
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._serve()

    def rotate(self) -> SigningKey:
        """A new RSA key replaces every key; the old ones are withdrawn."""
        self.keys = [SigningKey("RSA", number=1)]
        return self.keys[0]

    def token(
        self,
        *,
        key: SigningKey | None = None,
        scope: str | None = "plants:read plants:write",
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """An access token signed by `key` (the first key by default); claims override the defaults."""
        key = key or self.keys[0]
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": "client-1",
            "client_id": "client-1",
            "iat": now,
            "exp": now + 300,
            "scope": scope,
        }
        payload.update(claims)
        payload = {name: value for name, value in payload.items() if value is not None}
        header = {"kid": key.kid, "typ": "at+jwt", **(headers or {})}
        header = {name: value for name, value in header.items() if value is not None}
        return jwt.encode(payload, key.private, algorithm=key.algorithm, headers=header)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
