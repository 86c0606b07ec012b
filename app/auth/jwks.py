"""The identity provider's signing keys (a JWKS): fetched, cached, refreshed and rotated.

- First fetched at startup in a background thread, so a worker serves static tokens (and answers
  /readyz) without waiting for the provider. Until keys were loaded once, a JWT is answered 503.
- Cached for the JWKS answer's `Cache-Control: max-age`, kept within 1 minute and 1 day (10
  minutes without one), then refreshed in the background while the cached keys keep working.
- A token naming an unknown `kid` refetches at once, but at most once per 30 s per process:
  a flood of random `kid`s cannot make the service hammer the provider.
- If the provider is down, the cached keys keep working; a refresh is retried after 30 s.

Every fetch has one deadline of 2 s for the whole exchange, not per read.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from jwt import PyJWK
from jwt.exceptions import MissingCryptographyError, PyJWTError

from app.auth import shared_keys

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 2.0
REFETCH_INTERVAL = 30.0
DEFAULT_MAX_AGE = 600.0
MIN_MAX_AGE, MAX_MAX_AGE = 60.0, 86400.0
MAX_DOCUMENT_BYTES = 1 << 20
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)", re.IGNORECASE)

#: Which key types sign with which algorithms (RFC 7518 §3.1, RFC 8037): a token whose algorithm
#: does not fit its key's type is refused, whatever the algorithm list says.
KEY_FAMILIES = {
    "RS256": ("RSA", None), "RS384": ("RSA", None), "RS512": ("RSA", None),
    "PS256": ("RSA", None), "PS384": ("RSA", None), "PS512": ("RSA", None),
    "ES256": ("EC", "P-256"), "ES384": ("EC", "P-384"), "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", None),
}  # fmt: skip


class FetchError(Exception):
    """The provider did not give a usable document; the message never holds a secret."""


class SigningKey(NamedTuple):
    """One usable key of the provider's JWKS, and its JWK as published (PyJWK keeps that only
    privately, and `fits` reads its `crv` and whether it names an `alg`)."""

    jwk: PyJWK
    data: dict[str, Any]


def fits(key: SigningKey, algorithm: str) -> bool:
    """Whether `key` may verify a signature made with `algorithm`."""
    kty, crv = KEY_FAMILIES.get(algorithm, (None, None))
    data = key.data
    if kty is None or data.get("kty") != kty or (crv is not None and data.get("crv") != crv):
        return False
    if data.get("alg", algorithm) != algorithm or data.get("use", "sig") != "sig":
        return False
    # RFC 7517 §4.3: a key whose operations are listed verifies only if `verify` is among them (a
    # key published to encrypt to, `["encrypt"]` or `["wrapKey"]`, is not the provider's to sign).
    operations = data.get("key_ops", ["verify"])
    return isinstance(operations, list) and "verify" in operations


class KeySet:
    """One process's copy of the provider's keys."""

    def __init__(
        self,
        *,
        discovery_url: str,
        jwks_url: str | None,
        issuer: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._discovery_url, self._jwks_url, self._issuer = discovery_url, jwks_url, issuer
        #: Where the keys come from, as configured: the keys a sibling shared are taken only from it.
        self._source = f"{issuer}\0{discovery_url}\0{jwks_url or ''}"
        self._clock = clock
        self._keys: list[SigningKey] | None = None
        #: Bumped whenever the keys change: tokens verified under older keys are checked again.
        self.generation = 0
        self._fresh_until = 0.0
        self._last_unknown_kid_fetch = -REFETCH_INTERVAL
        self._fetch_lock = threading.Lock()
        self._refetch_lock = threading.Lock()
        self._loader_pid: int | None = None
        self._refreshing = False
        self._fetched = False  # the last fetch's outcome, for a caller that waited for it
        self._closed = False
        reference = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (keys := reference()) and keys._after_fork())  # type: ignore[func-returns-value]

    @property
    def loaded(self) -> bool:
        """Whether keys were ever loaded; if not, (re)starts the background load in this process."""
        if self._keys is None:
            self.start()
        return self._keys is not None

    def start(self) -> None:
        """Load the keys in the background, once per process (a forked worker starts its own),
        from the keys a sibling worker last loaded meanwhile (shared_keys.py)."""
        if self._loader_pid == os.getpid():
            return
        self._loader_pid = os.getpid()
        if self._keys is None:
            self._adopt_shared()
        threading.Thread(target=self._load_until_loaded, name="plants-jwks", daemon=True).start()

    def _load_until_loaded(self) -> None:
        delay = 0.5
        while not self._closed and not self.refresh() and self._keys is None:
            time.sleep(delay)
            delay = min(delay * 2, REFETCH_INTERVAL)

    def _adopt_shared(self) -> None:
        document = shared_keys.recall(self._source)
        keys = [] if document is None else usable_keys(json.loads(document))
        if keys:
            # The loader fetches at once (start); these serve until it has, or while it cannot.
            self._keys, self._fresh_until = keys, self._clock() + REFETCH_INTERVAL
            self.generation += 1
            log.info("Took %d signing key(s) of the identity provider from a worker.", len(keys))

    def close(self) -> None:
        """Stop loading in the background; a fetch in flight ends within its deadline."""
        self._closed = True

    def _after_fork(self) -> None:
        # A lock held by another thread at the fork would stay held in the child for ever.
        self._fetch_lock = threading.Lock()
        self._refetch_lock = threading.Lock()
        self._refreshing = False

    def find(self, kid: str | None, algorithm: str) -> tuple[PyJWK | None, bool]:
        """The key that verifies a token's signature, and whether `kid` names a known key at all.

        A token without `kid` uses the one key that fits its algorithm, if there is exactly one.
        An unknown `kid` refetches the keys at once, at most once per REFETCH_INTERVAL.
        """
        now = self._clock()
        if now >= self._fresh_until:
            self._refresh_in_background()
        key, known = self._match(kid, algorithm)
        if kid is not None and not known and self._may_refetch(now) and self.refresh(wait=FETCH_TIMEOUT):
            key, known = self._match(kid, algorithm)
        return key, known

    def _may_refetch(self, now: float) -> bool:
        with self._refetch_lock:
            if now - self._last_unknown_kid_fetch < REFETCH_INTERVAL:
                return False
            self._last_unknown_kid_fetch = now
            return True

    def _match(self, kid: str | None, algorithm: str) -> tuple[PyJWK | None, bool]:
        keys = self._keys or []
        if kid is None:
            fitting = [key.jwk for key in keys if fits(key, algorithm)]
            return (fitting[0] if len(fitting) == 1 else None), bool(fitting)
        named = [key for key in keys if key.jwk.key_id == kid]
        return next((key.jwk for key in named if fits(key, algorithm)), None), bool(named)

    def _refresh_in_background(self) -> None:
        if self._refreshing or self._keys is None:
            return
        self._refreshing = True
        threading.Thread(target=self.refresh, name="plants-jwks-refresh", daemon=True).start()

    def refresh(self, wait: float = -1) -> bool:
        """Fetch the keys now, one fetch at a time; whether they were loaded. One that finds a fetch
        under way waits for it (up to `wait` s) and takes its outcome: one deadline, not two."""
        try:
            if self._fetch_lock.acquire(blocking=False):
                try:
                    self._fetched = self._load()
                finally:
                    self._fetch_lock.release()
            elif self._fetch_lock.acquire(timeout=wait):
                self._fetch_lock.release()
            else:
                return False
            return self._fetched
        finally:
            self._refreshing = False

    def _load(self) -> bool:
        try:
            keys, max_age = self._fetch()
        except FetchError as exc:
            log.warning("Could not fetch the identity provider's keys: %s", exc)
            # The cached keys keep working; try again later, not on every request.
            self._fresh_until = self._clock() + REFETCH_INTERVAL
            return False
        if self._keys is None or _fingerprint(keys) != _fingerprint(self._keys):
            self._keys = keys
            self.generation += 1
            log.info("Loaded %d signing key(s) of the identity provider.", len(keys))
        _share(self._source, keys)
        self._fresh_until = self._clock() + max_age
        return True

    def _fetch(self) -> tuple[list[SigningKey], float]:
        deadline = time.monotonic() + FETCH_TIMEOUT
        jwks_url = self._jwks_url
        if jwks_url is None:
            discovery, _ = fetch_json(self._discovery_url, deadline)
            named = discovery.get("issuer")
            if named != self._issuer:
                raise FetchError(_another_issuer(self._discovery_url, self._issuer, named))
            jwks_url = discovery.get("jwks_uri")
            if not isinstance(jwks_url, str) or _scheme(jwks_url) not in ("https", "http"):
                raise FetchError(f"the discovery document at {self._discovery_url} has no jwks_uri")
        document, max_age = fetch_json(jwks_url, deadline)
        keys = usable_keys(document)
        if not keys:
            raise FetchError(f"the JWKS at {_cut(jwks_url)} has no usable key")
        # Kept once it served keys: until then each attempt reads the discovery document again,
        # so a provider that mends a bad jwks_uri is followed.
        self._jwks_url = jwks_url
        return keys, max_age


def _share(source: str, keys: list[SigningKey]) -> None:
    """Keep the keys for the workers that start later, at every fetch, not only when they changed:
    a record another worker left torn (killed as it wrote) is whole again at this worker's next
    refresh, not at the next rotation."""
    shared = json.dumps({"keys": [key.data for key in keys]}, separators=(",", ":"))
    shared_keys.remember(source, shared.encode())


def _scheme(url: str) -> str:
    """A discovery document's `jwks_uri`'s scheme. It is the provider's text: one urlsplit refuses
    (`http://[::1/`, a bracketed host that is no address) is a failed fetch like any other, never
    an error that would end the background loader."""
    try:
        return urlsplit(url).scheme
    except ValueError:
        raise FetchError(f"{_cut(url)} is not a URL this service can fetch (ValueError)") from None


#: A private key's members (RFC 7518 §6.2.2, §6.3.2 and §6.4.1, RFC 8037): an RSA key's primes
#: alone give away its private exponent, and PyJWK loads a key without `d` as a public one.
_PRIVATE_MEMBERS = frozenset(("d", "p", "q", "dp", "dq", "qi", "oth", "k"))


def usable_keys(document: dict[str, Any]) -> list[SigningKey]:
    """The JWKS's keys that PyJWK can load, in order; the others (an unknown `kty` or `alg`, a
    malformed member) are left out, as PyJWKSet leaves them. So is a private key (any of its
    private members, `d` or an RSA key's primes among them): PyJWK would load it as one, which
    cannot verify, or as the public key it holds, and whoever read the document can sign with it."""
    members = document.get("keys")
    keys = []
    for member in members if isinstance(members, list) else []:
        if not isinstance(member, dict):
            continue
        if not _PRIVATE_MEMBERS.isdisjoint(member):
            log.warning(
                "The identity provider's JWKS publishes a private key (kid %.80r): it is left out,"
                " and the provider should withdraw it, as anyone can sign tokens with it",
                member.get("kid"),
            )
            continue
        try:
            keys.append(SigningKey(PyJWK(member), member))
        except MissingCryptographyError:
            raise
        except (PyJWTError, TypeError, ValueError, AttributeError):
            continue
    return keys


def _fingerprint(keys: list[SigningKey]) -> list[str]:
    return sorted(json.dumps(key.data, sort_keys=True) for key in keys)


def fetch_json(url: str, deadline: float) -> tuple[dict[str, Any], float]:
    """GET a JSON object; with its max-age in seconds (Cache-Control, clamped), within `deadline`."""
    parts = urlsplit(url)
    # The jwks_uri is the provider's text, up to the document's size: a line a fetch, cut short.
    shown = _cut(url)
    remaining = max(0.01, deadline - time.monotonic())
    try:
        connection = _connection(parts.scheme, parts.hostname or "", parts.port, remaining)
    except (ValueError, http.client.InvalidURL) as exc:
        # A discovery document's jwks_uri is the provider's text: a port out of range or not a
        # number (ValueError), or a host with a space (InvalidURL), is a failed fetch like any other.
        raise FetchError(f"{shown} is not a URL this service can fetch ({type(exc).__name__})") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("GET", target, headers={"Accept": "application/json"})
        _bound(connection, deadline)
        response = connection.getresponse()
        body = bytearray()
        while len(body) <= MAX_DOCUMENT_BYTES:
            _bound(connection, deadline)
            chunk = response.read1(65536)
            if not chunk:
                break
            body += chunk
    except (OSError, http.client.HTTPException, UnicodeError) as exc:
        raise FetchError(f"{shown} {_failure(exc)} ({type(exc).__name__})") from None
    finally:
        connection.close()
    if response.status != 200:
        raise FetchError(f"{shown} answered {response.status}")
    if len(body) > MAX_DOCUMENT_BYTES:
        raise FetchError(f"{shown} answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        # Nesting deeper than the interpreter's recursion limit is a RecursionError, not a
        # ValueError: left out, it would end the background loader for good.
        raise FetchError(f"{shown} did not answer JSON") from None
    if not isinstance(document, dict):
        raise FetchError(f"{shown} did not answer a JSON object")
    return document, _max_age(response.getheader("Cache-Control"))


def _cut(url: str) -> str:
    """A URL as a log line shows it: its first 200 characters."""
    return url if len(url) <= 200 else url[:200] + "..."


def _connection(scheme: str, host: str, port: int | None, timeout: float) -> http.client.HTTPConnection:
    if scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
    return http.client.HTTPConnection(host, port, timeout=timeout)


def _failure(exc: BaseException) -> str:
    """What went wrong with a fetch, in words: a refused connection is not a slow provider."""
    if isinstance(exc, ConnectionRefusedError):
        return "refused the connection (is the provider running at that address?)"
    if isinstance(exc, socket.gaierror):
        return "has a host name that did not resolve"
    if isinstance(exc, UnicodeError):
        return "has a host name that is not a valid DNS name"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "has a TLS certificate this service does not trust (a private CA: set SSL_CERT_FILE)"
    if isinstance(exc, TimeoutError):
        return "did not answer in time"
    return "failed before its answer was complete"


def _bound(connection: http.client.HTTPConnection, deadline: float) -> None:
    """Every read gets only what is left of the deadline, so a slow drip cannot stretch it."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    if connection.sock is not None:
        connection.sock.settimeout(remaining)


def _max_age(cache_control: str | None) -> float:
    """How long to keep a JWKS: its max-age within 1 minute and 1 day; no-cache is the minute."""
    cache_control = cache_control or ""
    if re.search(r"no-(?:cache|store)", cache_control, re.IGNORECASE):
        return MIN_MAX_AGE
    match = _MAX_AGE.search(cache_control)
    if match is None:
        return DEFAULT_MAX_AGE
    return min(max(float(match.group(1)), MIN_MAX_AGE), MAX_MAX_AGE)


def _another_issuer(discovery_url: str, configured: str, named: Any) -> str:
    """Both issuers, as written (the provider's cut short: it is what a stranger's server says)."""
    shown = repr(named)[:200]
    hint = ""
    if isinstance(named, str) and named.rstrip("/") == configured.rstrip("/"):
        hint = ": they must be equal character for character, trailing slash included"
    return (
        f"the discovery document at {discovery_url} names the issuer {shown}, not PLANTS_JWT_ISSUER"
        f" {configured!r}{hint}"
    )
