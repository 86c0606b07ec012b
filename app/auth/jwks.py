"""The identity provider's signing keys (a JWKS): fetched, cached, refreshed and rotated.

- First fetched at startup in a background thread, so a worker serves static tokens (and answers
  /readyz) without waiting for the provider. Until keys were loaded once, a JWT is answered 503.
- Cached for the JWKS answer's `Cache-Control: max-age`, kept within 1 minute and 1 day (10
  minutes without one), then refreshed in the background while the cached keys keep working.
- A token naming an unknown `kid` refetches at once, but at most once per 30 s per process:
  a flood of random `kid`s cannot make the service hammer the provider. The fetch is made in the
  background, never on a request's thread: the request whose `kid` started it waits for it
  UNKNOWN_KID_WAIT at most, and only while the provider answers (its last fetch succeeded).
  Once a fetch has failed, an unknown `kid` is refused at once until one succeeds: made-up `kid`s
  cannot hold request threads on a provider that hangs.
- If the provider is down, the cached keys keep working; a refresh is retried after 30 s.
- One fetch at a time in the background, however many requests find the keys stale or name
  unknown `kid`s: each waiter takes its outcome.

Each fetch (provider_fetch.py) has one deadline of 2 s for the whole exchange, not per read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from jwt import PyJWK
from jwt.exceptions import MissingCryptographyError, PyJWTError

from app.auth import shared_keys
from app.auth.key_choice import SigningKey, match
from app.auth.provider_fetch import FetchError, cut, fetch_jwks

log = logging.getLogger(__name__)

REFETCH_INTERVAL = 30.0
#: How long the request whose unknown `kid` started a fetch waits for its keys, while the provider
#: answers: a provider that answers at all sends its JWKS well within it.
UNKNOWN_KID_WAIT = 1.0

#: This process's key sets, for the one fork hook below (a fork is the process's concern, not one
#: key set's: a hook per key set could never be removed, and would grow with every app built).
#: Weak: an app that is dropped takes its key set with it.
_LIVE: weakref.WeakSet[KeySet] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for keys in list(_LIVE):
        keys._new_locks()


os.register_at_fork(after_in_child=_after_fork_in_child)


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
        self._source = KeySource(discovery_url=discovery_url, jwks_url=jwks_url, issuer=issuer)
        self._clock = clock
        self._keys: list[SigningKey] | None = None
        #: Bumped whenever the keys change: tokens verified under older keys are checked again.
        self.generation = 0
        self._fresh_until = 0.0
        self._last_unknown_kid_fetch = -REFETCH_INTERVAL
        self._answering = True  # whether the provider's last fetch succeeded (or none was made yet)
        self._new_locks()
        self._loader_pid: int | None = None
        self._closed = False
        _LIVE.add(self)

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
        keys = self._source.recall()
        if keys:
            # The loader fetches at once (start); these serve until it has, or while it cannot.
            self._keys, self._fresh_until = keys, self._clock() + REFETCH_INTERVAL
            self.generation += 1
            log.info("Took %d signing key(s) of the identity provider from a worker.", len(keys))

    def close(self) -> None:
        """Stop loading in the background; a fetch in flight ends within its deadline."""
        self._closed = True

    def _new_locks(self) -> None:
        """Made anew in a forked child too: a lock another thread held at the fork would stay held
        there for ever. `_refreshing` is held while a background fetch is on its way (`_fetched`
        is set at its end), and taken without waiting: of the requests that ask at once, one
        starts it."""
        self._fetch_lock = threading.Lock()
        self._refetch_lock = threading.Lock()
        self._refreshing = threading.Lock()
        self._fetched: threading.Event | None = None

    def find(self, kid: str | None, algorithm: str, refetch: bool = True) -> tuple[PyJWK | None, bool]:
        """The key that verifies a token's signature, and whether `kid` names a known key at all.

        A token without `kid` uses the one key that fits its algorithm, if there is exactly one.
        An unknown `kid` refetches the keys at once (_refetched), at most once per REFETCH_INTERVAL,
        unless `refetch` is False (a watch asking whether its token's key is still published).
        """
        now = self._clock()
        if now >= self._fresh_until and self._keys is not None:
            # Refreshed in the background, unless a refresh is on its way or one that ended
            # meanwhile made them fresh: one fetch, however many requests found them stale at once.
            self._fetch_in_background(unless_fresh_at=now)
        key, known = match(self._keys or [], kid, algorithm)
        if refetch and kid is not None and not known and self._refetched(now):
            key, known = match(self._keys or [], kid, algorithm)
        return key, known

    def _refetched(self, now: float) -> bool:
        """An unknown `kid`'s fetch, at most once per REFETCH_INTERVAL (whether it was made), in the
        background (or the one already in flight: its keys are as new). Waited for UNKNOWN_KID_WAIT
        at most, and not at all once the provider has failed to answer: a provider that hangs
        would hold the request's thread to the fetch's deadline."""
        with self._refetch_lock:
            if now - self._last_unknown_kid_fetch < REFETCH_INTERVAL:
                return False
            self._last_unknown_kid_fetch = now
        fetched = self._fetch_in_background()
        if fetched is not None and self._answering:
            fetched.wait(UNKNOWN_KID_WAIT)
        return True

    def _fetch_in_background(self, unless_fresh_at: float | None = None) -> threading.Event | None:
        """The end of the background fetch in flight, starting one when none is, unless one that
        ended meanwhile left the keys fresh at `unless_fresh_at`; None when none was started."""
        if not self._refreshing.acquire(blocking=False):
            return self._fetched
        if unless_fresh_at is not None and unless_fresh_at < self._fresh_until:
            self._refreshing.release()
            return None
        fetched = self._fetched = threading.Event()
        try:
            threading.Thread(
                target=self._refresh_then_release, args=(fetched,), name="plants-jwks-refresh", daemon=True
            ).start()
        except RuntimeError as exc:
            # No thread to be had now (the process at its limits): held, the lock would stop every
            # later refresh, a withdrawn key trusted for ever. The next request tries again.
            fetched.set()
            self._refreshing.release()
            log.warning("Could not start refreshing the identity provider's keys: %s", exc)
            return None
        return fetched

    def _refresh_then_release(self, fetched: threading.Event) -> None:
        try:
            self.refresh()
        finally:
            fetched.set()
            self._refreshing.release()

    def refresh(self, wait: float = -1) -> bool:
        """Fetch the keys now (one fetch at a time); whether they were loaded."""
        if not self._fetch_lock.acquire(timeout=wait):
            return False
        return self._refresh_holding_lock()

    def _refresh_holding_lock(self) -> bool:
        # The keys are kept before the lock is released: whoever waited for this fetch reads them.
        try:
            keys, max_age = self._source.fetch()
            self._keep(keys, max_age)
        except FetchError as exc:
            log.warning("Could not fetch the identity provider's keys: %s", exc)
            # The cached keys keep working; try again later, not on every request.
            self._fresh_until = self._clock() + REFETCH_INTERVAL
            self._answering = False
            return False
        finally:
            self._fetch_lock.release()
        self._answering = True
        return True

    def _keep(self, keys: list[SigningKey], max_age: float) -> None:
        if self._keys is None or _fingerprint(keys) != _fingerprint(self._keys):
            self._keys = keys
            self.generation += 1
            log.info("Loaded %d signing key(s) of the identity provider.", len(keys))
        # At every fetch, not only when they changed: a record another worker left torn (killed
        # as it wrote) is whole again at this worker's next refresh, not at the next rotation.
        self._source.share(keys)
        self._fresh_until = self._clock() + max_age


class KeySource:
    """Where a key set's keys come from: the provider, and the keys a sibling worker shared from
    the same provider (shared_keys.py). Each document is read as `usable_keys` reads it."""

    def __init__(self, *, discovery_url: str, jwks_url: str | None, issuer: str) -> None:
        self._discovery_url, self._jwks_url, self._issuer = discovery_url, jwks_url, issuer
        #: The provider as configured: the keys a sibling shared are taken only from the same one.
        self._name = f"{issuer}\0{discovery_url}\0{jwks_url or ''}"
        #: The digests of the private keys the JWKS now publishes, each warned of once (usable_keys).
        self._warned: set[str] = set()

    def fetch(self) -> tuple[list[SigningKey], float]:
        """The provider's usable keys, and for how long they may be cached; FetchError when it
        has none or cannot be read (provider_fetch.py)."""
        document, max_age, jwks_url = fetch_jwks(self._discovery_url, self._jwks_url, self._issuer)
        keys = usable_keys(document, self._warned)
        if not keys:
            raise FetchError(f"the JWKS at {cut(jwks_url)} has no usable key")
        # Kept once it served keys: until then each attempt reads the discovery document again,
        # so a provider that mends a bad jwks_uri is followed.
        self._jwks_url = jwks_url
        return keys, max_age

    def recall(self) -> list[SigningKey]:
        """The usable keys a sibling worker last shared from this provider; none when it did not."""
        document = shared_keys.recall(self._name)
        return [] if document is None else usable_keys(json.loads(document), self._warned)

    def share(self, keys: list[SigningKey]) -> None:
        """`keys`, for the sibling workers that start later."""
        shared = json.dumps({"keys": [key.data for key in keys]}, separators=(",", ":"))
        shared_keys.remember(self._name, shared.encode())


#: A private key's members (RFC 7518 §6.2.2, §6.3.2 and §6.4.1, RFC 8037): an RSA key's primes
#: alone give away its private exponent, and PyJWK loads a key without `d` as a public one.
_PRIVATE_MEMBERS = frozenset(("d", "p", "q", "dp", "dq", "qi", "oth", "k"))


def usable_keys(document: dict[str, Any], warned: set[str]) -> list[SigningKey]:
    """The JWKS's keys that PyJWK can load, in order; the others (an unknown `kty` or `alg`, a
    malformed member) are left out, as PyJWKSet leaves them. So is a private key (any of its
    private members, `d` or an RSA key's primes among them): PyJWK would load it as one, which
    cannot verify, and whoever read the document can sign with it. Its WARNING is logged once a
    key: every refresh reads the document again, so `warned` keeps the digests (never the keys)
    of the private keys this document publishes, and only those: one a provider withdrew is
    forgotten (warned of again if it comes back), so a provider that publishes a new one at each
    refresh does not grow the set for as long as the worker lives."""
    members = document.get("keys")
    keys, published = [], set()
    for member in members if isinstance(members, list) else []:
        if not isinstance(member, dict):
            continue
        if not _PRIVATE_MEMBERS.isdisjoint(member):
            published.add(_warn_of_private_key(member, warned))
            continue
        try:
            keys.append(SigningKey(PyJWK(member), member))
        except MissingCryptographyError:
            raise
        except (PyJWTError, TypeError, ValueError, AttributeError):
            continue
    warned.intersection_update(published)
    return keys


def _warn_of_private_key(member: dict[str, Any], warned: set[str]) -> str:
    """Warn of `member` unless `warned` holds it; its digest, now in `warned`."""
    digest = hashlib.sha256(_canonical(member).encode()).hexdigest()
    if digest in warned:
        return digest
    warned.add(digest)
    log.warning(
        "The identity provider's JWKS publishes a private key (kid %.80r): it is left out,"
        " and the provider should withdraw it, as anyone can sign tokens with it",
        member.get("kid"),
    )
    return digest


def _canonical(member: dict[str, Any]) -> str:
    return json.dumps(member, sort_keys=True)


def _fingerprint(keys: list[SigningKey]) -> list[str]:
    return sorted(_canonical(key.data) for key in keys)
