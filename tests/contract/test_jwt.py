"""JWT access tokens from a real local identity provider (tests/issuer.py), beside static tokens."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import select
import subprocess
import sys
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from app import ConfigurationError, create_app
from app.auth import jwks, provider_fetch
from app.extension import plants_state
from tests import issuer as issuer_module
from tests.helpers import error_of, in_time, refused_alike_and_documented
from tests.issuer import AUDIENCE, Issuer, SigningKey
from tests.servers import ROOT, TOKEN, free_port

PLANT = {"id": 7, "name": "Fern", "tag": "green"}
READ_ONLY_STATIC = "read-only-token"


@pytest.fixture
def issuer():
    provider = Issuer()
    yield provider
    provider.stop()


def wait_until_ready(app, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not app.extensions["plants"].auth.ready:
        assert time.monotonic() < deadline, "the provider's keys were not loaded"
        time.sleep(0.02)


@pytest.fixture
def make_jwt_app(issuer, store_settings):
    """A service on the store under test with JWT access tokens from `issuer`, keys loaded."""

    def make(wait: bool = True, **settings):
        app = create_app(
            {
                "TESTING": True,
                "PLANTS_API_TOKENS": TOKEN,
                "PLANTS_READ_TOKENS": READ_ONLY_STATIC,
                "PLANTS_JWT_ISSUER": issuer.url,
                "PLANTS_JWT_AUDIENCE": AUDIENCE,
                **store_settings,
                **settings,
            }
        )
        if wait:
            wait_until_ready(app)
        return app

    return make


@pytest.fixture(params=["memory"])
def store_settings(request):
    """Authentication does not depend on the store: memory, but where a test asks for both."""
    return {}


@pytest.fixture
def client(make_jwt_app):
    return make_jwt_app().test_client()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused(response, description: str) -> None:
    """401 invalid_token saying which check failed, and never the token."""
    error_of(response, 401)
    assert response.headers["WWW-Authenticate"] == (
        f'Bearer realm="plants", error="invalid_token", error_description="{description}"'
    )


# --- The operations and their scopes --------------------------------------------------------

OPERATIONS = {
    "create": ("POST", "/plants", PLANT, True, 200),
    "list": ("GET", "/plants", None, False, 200),
    "get": ("GET", "/plants/7", None, False, 200),
    "replace": ("PUT", "/plants/7", {"name": "Moss"}, True, 200),
    "patch": ("PATCH", "/plants/7", {"tag": None}, True, 200),
    "delete": ("DELETE", "/plants/7", None, True, 204),
    "metrics": ("GET", "/metrics", None, False, 200),
}


@pytest.mark.parametrize(
    ("claims", "may_read", "may_write"),
    [
        ({"scope": "plants:read"}, True, False),
        ({"scope": "openid plants:write"}, True, True),
        ({"scope": "plants:read plants:write"}, True, True),
        ({"scope": None, "scp": ["plants:read"]}, True, False),
        ({"scope": None, "scp": ["plants:write", "other"]}, True, True),
        ({"scope": None, "scp": "plants:read"}, True, False),
        ({"scope": "profile plants:readx"}, False, False),
        ({"scope": None}, False, False),
    ],
    ids=["read", "write", "both", "scp-read", "scp-write", "scp-string", "other", "none"],
)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_scopes_on_every_operation(issuer, make_jwt_app, claims, may_read, may_write, operation):
    app = make_jwt_app()
    client = app.test_client()
    client.post("/plants", json=PLANT, headers=bearer(TOKEN))
    method, path, body, writes, ok = OPERATIONS[operation]
    response = client.open(path, method=method, json=body, headers=bearer(issuer.token(**claims)))
    needed = "plants:write" if writes else "plants:read"
    if may_write if writes else may_read:
        assert response.status_code == ok, response.get_data()
    else:
        assert needed in error_of(response, 403)["message"]
        assert response.headers["WWW-Authenticate"] == (
            f'Bearer realm="plants", error="insufficient_scope", scope="{needed}"'
        )
    # A refused delete changed nothing.
    assert len(app.extensions["plants"].store) == (0 if operation == "delete" and may_write else 1)


@pytest.mark.parametrize("store_settings", ["memory", "redis"], indirect=True)
def test_jwt_and_static_tokens_side_by_side(issuer, make_jwt_app):
    client = make_jwt_app().test_client()
    writer, reader = issuer.token(), issuer.token(scope="plants:read")
    assert client.post("/plants", json=PLANT, headers=bearer(writer)).get_json() == {
        "name": "Fern",
        "tag": "green",
    }
    assert client.get("/plants/7", headers=bearer(reader)).status_code == 200
    assert client.get("/plants/7", headers=bearer(TOKEN)).get_json() == {"name": "Fern", "tag": "green"}
    assert client.get("/plants", headers=bearer(READ_ONLY_STATIC)).status_code == 200
    static_refusal = client.delete("/plants/7", headers=bearer(READ_ONLY_STATIC))
    assert static_refusal.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="insufficient_scope"'
    assert client.delete("/plants/7", headers=bearer(writer)).status_code == 204
    # A wrong static token is refused as before, without a JWT check's description.
    response = client.get("/plants", headers=bearer("not-a-token"))
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="invalid_token"'


def test_static_store_with_jwt_alone_needs_no_static_token(issuer):
    app = create_app({"PLANTS_JWT_ISSUER": issuer.url, "PLANTS_JWT_AUDIENCE": AUDIENCE})
    wait_until_ready(app)
    client = app.test_client()
    assert client.post("/plants", json=PLANT, headers=bearer(issuer.token())).status_code == 200


# --- Each refusal ------------------------------------------------------------------------------


def _hs256_with_public_key(issuer: Issuer) -> str:
    """The classic confusion attack: HS256 'signed' with the RSA public key as the secret."""
    key = issuer.keys[0]
    pem = key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = _b64({"alg": "HS256", "typ": "at+jwt", "kid": key.kid})
    payload = _b64(_claims(issuer))
    import hashlib
    import hmac

    signature = hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _alg_none(issuer: Issuer) -> str:
    header = _b64({"alg": "none", "typ": "at+jwt", "kid": issuer.keys[0].kid})
    return f"{header}.{_b64(_claims(issuer))}."


def _b64(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _claims(issuer: Issuer) -> dict:
    now = int(time.time())
    return {"iss": issuer.url, "aud": AUDIENCE, "sub": "x", "exp": now + 300, "scope": "plants:write"}


def _signed_by_another_key_same_kid(issuer: Issuer) -> str:
    impostor = SigningKey("RSA", kid=issuer.keys[0].kid, number=5)
    return issuer.token(key=impostor)


def _rs256_named_ec_key(issuer: Issuer) -> str:
    """An RS256 token whose kid names the provider's EC key: the algorithm does not fit the key."""
    rsa_key = issuer.keys[0]
    return jwt.encode(
        _claims(issuer),
        rsa_key.private,
        algorithm="RS256",
        headers={"kid": issuer.keys[1].kid, "typ": "at+jwt"},
    )


def _own_key_named_in_the_header(issuer: Issuer, kid: str | None = None) -> str:
    """A token signed by a key of the signer's own, which its header offers three ways (RFC 7515
    §4.1.2, §4.1.3 and §4.1.5): a JWKS URL (`jku`), the key itself (`jwk`), a certificate URL
    (`x5u`). Verification takes keys from the provider's JWKS alone, so none is ever read."""
    own = SigningKey("RSA", number=6)
    kid = kid or own.kid
    offered = {"jku": "https://attacker.example/jwks", "jwk": {**own.jwk, "kid": kid},
               "x5u": "https://attacker.example/cert.pem"}  # fmt: skip
    return issuer.token(key=own, headers={"kid": kid, **offered})


REFUSALS = {
    "expired beyond the leeway": (lambda i: i.token(exp=int(time.time()) - 31), "the token has expired"),
    "not yet valid (nbf)": (lambda i: i.token(nbf=int(time.time()) + 60), "the token is not yet valid"),
    "issued in the future (iat)": (
        lambda i: i.token(iat=int(time.time()) + 60),
        "the token is not yet valid",
    ),
    "wrong issuer": (lambda i: i.token(iss="https://other.example"), "the token is from another issuer"),
    "wrong audience": (
        lambda i: i.token(aud="https://other.example"),
        "the token is meant for another audience",
    ),
    "audience list without ours": (
        lambda i: i.token(aud=["a", "b"]),
        "the token is meant for another audience",
    ),
    "no exp": (lambda i: i.token(exp=None), "the token lacks a required claim (exp, iss or aud)"),
    "no aud": (lambda i: i.token(aud=None), "the token lacks a required claim (exp, iss or aud)"),
    "bad signature": (_signed_by_another_key_same_kid, "the signature does not verify"),
    "tampered payload": (
        lambda i: (
            lambda t: t.split(".")[0] + "." + _b64({**_claims(i), "sub": "admin"}) + "." + t.split(".")[2]
        )(i.token()),
        "the signature does not verify",
    ),
    "unknown kid": (
        lambda i: i.token(headers={"kid": "no-such-key"}),
        "the token names no known signing key",
    ),
    "own key offered by jku, jwk and x5u": (
        _own_key_named_in_the_header,
        "the token names no known signing key",
    ),
    "own key offered under a published kid": (
        lambda i: _own_key_named_in_the_header(i, i.keys[0].kid),
        "the signature does not verify",
    ),
    "alg none": (_alg_none, "the signing algorithm is not allowed"),
    "HS256 with the public key": (_hs256_with_public_key, "the signing algorithm is not allowed"),
    "algorithm not fitting the key": (_rs256_named_ec_key, "the signing algorithm is not allowed"),
    "ES256 not on the list": (lambda i: i.token(key=i.keys[1]), "the signing algorithm is not allowed"),
    "an ID token's typ": (
        lambda i: i.token(headers={"typ": "id_token+jwt"}),
        "the token is not an access token (typ)",
    ),
    "malformed": (lambda i: "abc.def.ghi", "the token is malformed"),
    "malformed header": (lambda i: _b64({"alg": "RS256"})[:-2] + ".e30.sig", "the token is malformed"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_each_refusal_is_401_naming_the_check(issuer, make_jwt_app, case, caplog):
    settings = {"PLANTS_JWT_ALGORITHMS": "RS256"} if case == "ES256 not on the list" else {}
    app = make_jwt_app(**settings)
    client = app.test_client()
    make, description = REFUSALS[case]
    token = make(issuer)
    with caplog.at_level(logging.DEBUG):
        response = client.post("/plants", json=PLANT, headers=bearer(token))
    refused(response, description)
    assert token.encode() not in response.get_data()
    assert token not in str(response.headers)
    assert token not in caplog.text
    assert len(app.extensions["plants"].store) == 0


def _signed_payload(issuer: Issuer, payload: bytes) -> str:
    """A token the provider's RSA key signs over `payload` as written: JSON that PyJWT's encoder
    would not write (a lone surrogate escape, an integer past a float's range)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    key = issuer.keys[0]
    header = _b64({"alg": "RS256", "typ": "at+jwt", "kid": key.kid})
    signing_input = f"{header}.{base64.urlsafe_b64encode(payload).rstrip(b'=').decode()}"
    signature = key.private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _claims_text(issuer: Issuer, **members: str) -> bytes:
    """The default claims as JSON text, with `members` written in as raw JSON values."""
    claims = {**_claims(issuer), "sub": "client-1"}
    text = json.dumps({name: value for name, value in claims.items() if name not in members})
    return (text[:-1] + "".join(f', "{name}": {value}' for name, value in members.items()) + "}").encode()


def test_an_exp_past_a_floats_range_is_refused_as_malformed(issuer, make_jwt_app):
    app = make_jwt_app(PLANTS_RATE_LIMIT="10/minute")
    token = _signed_payload(issuer, _claims_text(issuer, exp="1" + "0" * 400))
    assert jwt.decode(token, options={"verify_signature": False})["exp"] == 10**400
    refused(app.test_client().post("/plants", json=PLANT, headers=bearer(token)), "the token is malformed")
    assert len(app.extensions["plants"].store) == 0


@pytest.mark.parametrize(
    "members",
    [{"nbf": '"{now}"'}, {"iat": '" {now} "'}, {"nbf": "true"}, {"iat": "false"}],
    ids=["nbf-string", "iat-string", "nbf-true", "iat-false"],
)
def test_a_time_claim_that_is_no_json_number_is_refused_as_malformed(issuer, make_jwt_app, members):
    """RFC 7519 §2: a NumericDate is a JSON number. PyJWT reads the times with int(), which takes
    a string of digits and a boolean: such a token is no access token this service verifies."""
    app = make_jwt_app()
    client = app.test_client()
    written = {name: value.format(now=int(time.time()) - 60) for name, value in members.items()}
    token = _signed_payload(issuer, _claims_text(issuer, **written))
    refused(client.post("/plants", json=PLANT, headers=bearer(token)), "the token is malformed")
    refused(client.post("/events/tickets", headers=bearer(token)), "the token is malformed")
    assert len(app.extensions["plants"].store) == 0


def test_a_jwt_whose_exp_falls_within_this_second_gets_no_ticket_already_expired(issuer, make_jwt_app):
    """RFC 7519 §2: `exp` may be a fraction. A ticket expires on a whole second, no later than
    the JWT: one minted in the JWT's last second would be expired as it is made (its 200 said
    `expires_in: 0`, and its first use was a 401); the mint is refused as the JWT past its `exp`."""
    client = make_jwt_app().test_client()
    while time.time() % 1 > 0.5:  # the token made and sent within this second, with room to spare
        time.sleep(0.05)
    token = issuer.token(exp=math.floor(time.time()) + 0.999)
    refused(client.post("/events/tickets", headers=bearer(token)), "the token has expired")


def test_a_subject_with_a_lone_surrogate_is_a_client_of_its_own(issuer, make_jwt_app):
    client = make_jwt_app(PLANTS_RATE_LIMIT="2/minute").test_client()
    odd = _signed_payload(issuer, _claims_text(issuer, sub='"\\ud800"'))
    assert [client.get("/plants", headers=bearer(odd)).status_code for _ in range(2)] == [200, 200]
    error_of(client.get("/plants", headers=bearer(odd)), 429)
    # Another subject keeps its own budget.
    assert client.get("/plants", headers=bearer(issuer.token())).status_code == 200


@pytest.mark.parametrize(
    "claims",
    [{"exp": -10}, {"nbf": 10}, {"iat": 10}, {"aud": ["https://other.example", AUDIENCE]}],
    ids=["expired-within-leeway", "nbf-within-leeway", "iat-within-leeway", "audience-list"],
)
def test_accepted_within_the_leeway_and_with_an_audience_list(issuer, client, claims):
    now = int(time.time())
    claims = {name: value if name == "aud" else now + value for name, value in claims.items()}
    assert client.post("/plants", json=PLANT, headers=bearer(issuer.token(**claims))).status_code == 200


@pytest.mark.parametrize("typ", ["at+jwt", "application/at+jwt", "JWT", "AT+JWT", ""])
def test_access_token_types_accepted(issuer, client, typ):
    token = issuer.token(headers={"typ": typ})
    assert ("typ" in jwt.get_unverified_header(token)) == bool(typ)
    assert client.get("/plants", headers=bearer(token)).status_code == 200


def test_token_without_kid_needs_exactly_one_fitting_key(issuer, make_jwt_app):
    client = make_jwt_app().test_client()
    # The provider has one RSA key and one EC key: one fits RS256, one fits ES256.
    assert client.get("/plants", headers=bearer(issuer.token(headers={"kid": None}))).status_code == 200
    issuer.keys.append(SigningKey("RSA", number=2))
    client = make_jwt_app().test_client()  # a new process's view of the two RSA keys
    refused(
        client.get("/plants", headers=bearer(issuer.token(headers={"kid": None}))),
        "the token names no known signing key",
    )


def test_the_verified_token_cache_never_outlives_exp(issuer, make_jwt_app):
    client = make_jwt_app(PLANTS_JWT_LEEWAY=0).test_client()
    token = issuer.token(exp=int(time.time()) + 2)
    assert client.get("/plants", headers=bearer(token)).status_code == 200
    assert client.get("/plants", headers=bearer(token)).status_code == 200  # from the cache
    time.sleep(max(0, jwt.decode(token, options={"verify_signature": False})["exp"] - time.time()) + 0.1)
    refused(client.get("/plants", headers=bearer(token)), "the token has expired")


# --- Keys: rotation, a provider down or hanging, floods, the first load -----------------------


def test_rotation_without_restart_and_withdrawn_keys_refused(issuer, client):
    old_token = issuer.token()
    assert client.get("/plants", headers=bearer(old_token)).status_code == 200
    new_key = issuer.rotate()
    # A new kid refetches at once.
    assert client.get("/plants", headers=bearer(issuer.token(key=new_key))).status_code == 200
    # The old key is withdrawn: its token, verified and cached before, is refused now.
    refused(client.get("/plants", headers=bearer(old_token)), "the token names no known signing key")


def test_provider_down_cached_keys_keep_working(issuer, client, monkeypatch):
    # A fetch's deadline an hour long: a request that waited on the provider that refuses it,
    # rather than taking the refusal, would be held that hour.
    monkeypatch.setattr(provider_fetch, "FETCH_TIMEOUT", 3600.0)
    assert client.get("/plants", headers=bearer(issuer.token())).status_code == 200
    issuer.down()
    try:
        # A token never seen before, under a cached key.
        fresh = issuer.token(sub="client-2")
        assert client.post("/plants", json=PLANT, headers=bearer(fresh)).status_code == 200
        unknown = in_time(lambda: client.get("/plants", headers=bearer(issuer.token(key=SigningKey("EC")))))
        refused(unknown, "the token names no known signing key")
    finally:
        issuer.up()


def test_provider_hanging_unknown_kid_answered_within_the_fetch_timeout(issuer, client, monkeypatch, caplog):
    monkeypatch.setattr(issuer_module, "HANG_SECONDS", 3600.0)  # answered at the deadline, or in an hour
    assert client.get("/plants", headers=bearer(issuer.token())).status_code == 200
    before = issuer.fetches["jwks"]
    issuer.hanging = True
    with caplog.at_level(logging.WARNING, logger=jwks.__name__):
        response = in_time(lambda: client.get("/plants", headers=bearer(issuer.token(key=SigningKey("EC")))))
        _wait_until(lambda: "did not answer in time" in caplog.text, lambda: caplog.text)
    refused(response, "the token names no known signing key")
    assert issuer.fetches["jwks"] == before + 1  # it asked the provider once, which never answered
    # Cached keys still work while it hangs.
    assert client.get("/plants", headers=bearer(issuer.token(sub="client-3"))).status_code == 200


def test_provider_trickling_unknown_kid_answered_within_the_fetch_timeout(issuer, client, caplog):
    """A provider (or a proxy before it) that sends its answer a byte a second: each read finds a
    byte within the deadline, the answer is whole only minutes later. The fetch's deadline is for
    the whole exchange, so the fetch (in the background) fails at it, the request that started it
    is answered by then, and the provider is asked again once the keys are stale, not never."""
    assert client.get("/plants", headers=bearer(issuer.token())).status_code == 200
    issuer.drip = 1.0
    with caplog.at_level(logging.WARNING, logger=jwks.__name__):
        response = in_time(lambda: client.get("/plants", headers=bearer(issuer.token(key=SigningKey("EC")))))
        _wait_until(lambda: "did not answer in time" in caplog.text, lambda: caplog.text)
    refused(response, "the token names no known signing key")
    # Cached keys still work while it trickles.
    assert client.get("/plants", headers=bearer(issuer.token(sub="client-3"))).status_code == 200


def test_every_operation_behind_the_token_documents_the_503_before_any_key(issuer, make_jwt_app):
    """Until the provider's keys are first loaded, a JWT is 503 before any operation that needs a
    token, the metrics too: each one's document says so, with its Retry-After."""
    issuer.down()
    client = make_jwt_app(wait=False).test_client()
    waits = refused_alike_and_documented(client, bearer(issuer.token()), 503, "Retry-After")
    assert min(map(int, waits)) >= 1


def test_a_flood_of_random_kids_fetches_at_most_once(issuer, client, monkeypatch):
    # An hour between two unknown kids' fetches: the flood is within one interval however slow the
    # machine, and its count of fetches is the check.
    monkeypatch.setattr(jwks, "REFETCH_INTERVAL", 3600.0)
    assert client.get("/plants", headers=bearer(issuer.token())).status_code == 200
    before = issuer.fetches["jwks"]
    key = issuer.keys[0]
    for number in range(1000):
        token = issuer.token(headers={"kid": f"random-{number}"}, key=key)
        refused(client.get("/plants", headers=bearer(token)), "the token names no known signing key")
    assert issuer.fetches["jwks"] - before <= 1


def test_before_any_key_jwt_is_503_static_unaffected_then_ready(issuer, make_jwt_app):
    issuer.down()
    app = make_jwt_app(wait=False)
    client = app.test_client()
    response = client.get("/plants", headers=bearer(issuer.token()))
    error_of(response, 503)
    assert int(response.headers["Retry-After"]) >= 1
    assert client.get("/plants", headers=bearer(TOKEN)).status_code == 200
    error_of(client.get("/readyz"), 503)
    assert client.get("/healthz").status_code == 200
    issuer.up()
    wait_until_ready(app)  # the background load retries by itself
    assert client.get("/readyz").status_code == 200
    assert client.get("/plants", headers=bearer(issuer.token())).status_code == 200


def test_jwks_max_age_is_honoured_and_clamped(issuer):
    from app.auth.jwks import KeySet

    now = [1000.0]
    issuer.cache_control = "public, max-age=5"  # below the minute: kept a minute
    keys = KeySet(
        discovery_url=f"{issuer.url}/.well-known/openid-configuration",
        jwks_url=None,
        issuer=issuer.url,
        clock=lambda: now[0],
    )
    assert keys.refresh()
    assert (issuer.fetches["discovery"], issuer.fetches["jwks"]) == (1, 1)
    kid = issuer.keys[0].kid
    now[0] += 59
    assert keys.find(kid, "RS256")[0] is not None
    assert issuer.fetches["jwks"] == 1
    now[0] += 2  # past the minute: refreshed in the background, the cached keys answer meanwhile
    assert keys.find(kid, "RS256")[0] is not None
    deadline = time.monotonic() + 5
    while issuer.fetches["jwks"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert issuer.fetches["discovery"] == 1  # the jwks_uri is discovered once


def test_unknown_kid_refetch_at_most_once_per_30_seconds(issuer):
    from app.auth.jwks import KeySet

    now = [1000.0]
    keys = KeySet(
        discovery_url="unused", jwks_url=f"{issuer.url}/jwks", issuer=issuer.url, clock=lambda: now[0]
    )
    assert keys.refresh()
    for _ in range(50):
        assert keys.find("unknown", "RS256") == (None, False)
    assert issuer.fetches["jwks"] == 2
    now[0] += 29
    keys.find("unknown", "RS256")
    assert issuer.fetches["jwks"] == 2
    now[0] += 1
    keys.find("unknown", "RS256")
    assert issuer.fetches["jwks"] == 3


def _loaded_then_hanging(issuer: Issuer, monkeypatch) -> tuple[jwks.KeySet, list[float]]:
    """A key set whose clock is the list's, its keys loaded; then the provider hangs an hour."""
    now = [1000.0]
    keys = jwks.KeySet(
        discovery_url="unused", jwks_url=f"{issuer.url}/jwks", issuer=issuer.url, clock=lambda: now[0]
    )
    assert keys.refresh()
    monkeypatch.setattr(issuer_module, "HANG_SECONDS", 3600.0)
    issuer.hanging = True
    return keys, now


def test_an_unknown_kid_during_a_refresh_waits_for_that_fetch_not_for_a_second_one(issuer, monkeypatch):
    """The provider hangs while the stale keys are refreshed in the background: a token naming an
    unknown `kid` takes that fetch's outcome, within its deadline, as the docs say. It waited for
    it to end and then fetched again, twice the deadline, holding the request's thread."""
    from app.auth.provider_fetch import FETCH_TIMEOUT

    # Either fetch ends at its deadline, or in an hour: waiting for its end would be held that long.
    keys, now = _loaded_then_hanging(issuer, monkeypatch)
    now[0] += 86400  # the keys are stale: the next look refreshes them in the background
    assert keys.find(issuer.keys[0].kid, "RS256")[0] is not None
    _wait_until(lambda: issuer.fetches["jwks"] == 2, lambda: "the refresh did not start")
    assert in_time(lambda: keys.find("unknown", "RS256")) == (None, False)
    assert issuer.fetches["jwks"] == 2  # no second fetch
    issuer.hanging = False
    now[0] += 30  # once the background refresh has ended, fetching again works
    _wait_until(lambda: keys.refresh(wait=FETCH_TIMEOUT), lambda: "the keys were not fetched again")
    assert issuer.fetches["jwks"] >= 3


def test_two_requests_that_find_the_keys_stale_at_once_start_one_fetch(issuer):
    """Two requests find the keys stale together: the provider is asked once. Each request's
    first look at the keys waits here for the other's, so that both decide together; then two
    background refreshes started, fetching the same keys twice in a row."""
    import contextlib
    import threading

    from app.auth.jwks import KeySet

    together = threading.Barrier(2, timeout=2)
    waiting: set[int] = set()

    class BothAtOnce(KeySet):
        """A key set whose keys the two requests' threads first read together."""

        @property
        def _keys(self):
            if threading.get_ident() in waiting:
                waiting.discard(threading.get_ident())
                # Broken when the other request does not come this way: it was not let in.
                with contextlib.suppress(threading.BrokenBarrierError):
                    together.wait()
            return self.__dict__["keys"]

        @_keys.setter
        def _keys(self, keys):
            self.__dict__["keys"] = keys

    now = [1000.0]
    keys = BothAtOnce(
        discovery_url="unused", jwks_url=f"{issuer.url}/jwks", issuer=issuer.url, clock=lambda: now[0]
    )
    assert keys.refresh()
    now[0] += 86400  # the keys are stale: the next look refreshes them in the background
    kid = issuer.keys[0].kid
    found = []

    def request() -> None:
        waiting.add(threading.get_ident())
        found.append(keys.find(kid, "RS256")[0])

    requests = [threading.Thread(target=request) for _ in range(2)]
    for thread in requests:
        thread.start()
    for thread in requests:
        thread.join(timeout=10)
    assert len(found) == 2
    assert None not in found  # the cached keys answered meanwhile
    for thread in threading.enumerate():
        if thread.name == "plants-jwks-refresh":
            thread.join(timeout=10)
    assert issuer.fetches["jwks"] == 2  # the first load, and one refresh


def test_made_up_kids_hold_no_request_thread_while_the_provider_hangs(issuer, monkeypatch, caplog):
    """Each made-up `kid` (one per REFETCH_INTERVAL) had its request fetch the keys itself, and a
    provider that hangs held that request's thread for the fetch's deadline every 30 s: on a
    worker with one request thread, the worker. The fetch is made in the background; the request
    whose `kid` started it waits for it briefly, and only while the provider answers: once a fetch
    has failed, a made-up `kid` is 401 at once, while the provider is still asked again."""
    keys, now = _loaded_then_hanging(issuer, monkeypatch)
    with caplog.at_level(logging.WARNING, logger=jwks.__name__):
        assert in_time(lambda: keys.find("made-up-1", "RS256")) == (None, False)
        _wait_until(lambda: "did not answer in time" in caplog.text, lambda: "the fetch did not fail")
    # From now on, a fetch's deadline and any wait for it are an hour: a request held by either
    # would be held that long.
    monkeypatch.setattr(provider_fetch, "FETCH_TIMEOUT", 3600.0)
    monkeypatch.setattr(jwks, "UNKNOWN_KID_WAIT", 3600.0)
    now[0] += jwks.REFETCH_INTERVAL
    assert in_time(lambda: keys.find("made-up-2", "RS256")) == (None, False)
    _wait_until(lambda: issuer.fetches["jwks"] == 3, lambda: "the provider was not asked again")
    # The fetch in flight is not asked for again, however many made-up kids come meanwhile.
    now[0] += jwks.REFETCH_INTERVAL
    assert in_time(lambda: keys.find("made-up-3", "RS256")) == (None, False)
    assert keys.find(issuer.keys[0].kid, "RS256")[0] is not None  # the cached keys serve
    assert issuer.fetches["jwks"] == 3


def test_key_sets_that_were_dropped_leave_nothing_behind():
    """A host that builds many apps (a test suite, an app per tenant) keeps no trace of each key
    set it dropped: it kept a fork hook each, which a process can never remove."""
    script = (
        "import gc\n"
        "from app.auth.jwks import KeySet\n"
        "def build():\n"
        "    KeySet(discovery_url='unused', jwks_url='https://idp.example/jwks', issuer='https://idp.example')\n"
        "build(); gc.collect(); before = len(gc.get_objects())\n"
        "for _ in range(500):\n"
        "    build()\n"
        "gc.collect(); print(len(gc.get_objects()) - before)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout) < 100, result.stdout  # each had left its fork hook behind


def test_a_process_forked_during_a_fetch_fetches_the_keys_itself(issuer):
    """A fork while a fetch is in flight (a host that forks after building its app): the child's
    copy of the fetch's lock would be held for ever, and the child never fetch the keys. Other key
    sets, live and dropped, are beside it."""
    script = (
        "import gc, os, sys, threading\n"
        "from app.auth.jwks import KeySet\n"
        "from app.auth.provider_fetch import FETCH_TIMEOUT\n"
        "def keys():\n"
        "    return KeySet(discovery_url='unused', jwks_url=sys.argv[1], issuer='https://idp.example')\n"
        "dropped, live, fetching = keys(), keys(), keys()\n"
        "del dropped; gc.collect()\n"
        "threading.Thread(target=fetching.refresh, daemon=True).start()\n"
        "sys.stdin.readline()  # the provider got the fetch, and hangs\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    os._exit(0 if fetching.refresh(wait=FETCH_TIMEOUT / 2) and live.refresh(wait=0) else 1)\n"
        "print(os.waitpid(child, 0)[1])\n"
    )
    issuer.hanging = True
    child = _python(script, f"{issuer.url}/jwks")
    try:
        _wait_until(lambda: issuer.fetches["jwks"] == 1, lambda: "the first fetch did not start")
        issuer.hanging = False  # the fetch in flight hangs on; the child's own is answered
        out, err = child.communicate("go\n", timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, err[-3000:]
    assert out.strip() == "0", err[-3000:]
    assert issuer.fetches["jwks"] == 3


def test_stale_keys_serve_when_no_refresh_thread_can_start_and_are_refreshed_later(issuer):
    """A request finds the keys stale while the process cannot start a thread (at its limits):
    it is answered with the cached keys, not an error, and the next request that finds them
    stale refreshes them, so that a key the provider has withdrawn since stops verifying."""
    script = (
        "import sys, threading\n"
        "from app.auth.jwks import KeySet\n"
        "now = [1000.0]\n"
        "keys = KeySet(discovery_url='unused', jwks_url=sys.argv[1], issuer='https://idp.example',\n"
        "              clock=lambda: now[0])\n"
        "assert keys.refresh()\n"
        "now[0] += 86400  # stale: the next look refreshes them in the background\n"
        "threading.stack_size(1 << 40)  # no thread's stack can be had: none starts\n"
        "try:\n"
        "    print(keys.find(sys.argv[2], 'RS256')[0] is not None, flush=True)\n"
        "finally:\n"
        "    threading.stack_size(0)\n"
        "sys.stdin.readline()  # the provider has withdrawn that key meanwhile\n"
        "keys.find(sys.argv[2], 'RS256')\n"
        "for thread in threading.enumerate():\n"
        "    if thread.name == 'plants-jwks-refresh':\n"
        "        thread.join(timeout=10)\n"
        "print(keys.find(sys.argv[2], 'RS256')[0] is None)\n"
    )
    withdrawn = issuer.keys[0].kid
    child = _python(script, f"{issuer.url}/jwks", withdrawn)
    try:
        assert child.stdout is not None
        assert select.select([child.stdout], [], [], 30)[0], "the first look did not end"
        first = child.stdout.readline().strip()
        issuer.rotate()
        out, err = child.communicate("go\n", timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, err[-3000:]
    assert [first, out.strip()] == ["True", "True"], err[-3000:]
    assert issuer.fetches["jwks"] >= 2  # the first load, and the refresh once a thread could start


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    """`script` run by a Python of its own, its standard streams piped as text."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# --- Settings, the document, metrics, rate limits -----------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"PLANTS_JWT_AUDIENCE": None}, "PLANTS_JWT_AUDIENCE is required with PLANTS_JWT_ISSUER"),
        ({"PLANTS_JWT_ALGORITHMS": "RS256,HS256"}, "not 'HS256'"),
        ({"PLANTS_JWT_ALGORITHMS": "none"}, "not 'none'"),
        ({"PLANTS_JWT_ALGORITHMS": ","}, "not none at all"),
        ({"PLANTS_JWT_ISSUER": "http://idp.example"}, "must use https"),
        ({"PLANTS_JWT_ISSUER": "idp.example"}, "must be an https:// URL"),
        # OpenID Connect Discovery §3: no query. Its discovery URL would be the query's tail.
        ({"PLANTS_JWT_ISSUER": "https://idp.example/realms/plants?tenant=1"}, "no query"),
        ({"PLANTS_JWT_ISSUER": "https://idp.example/realms/plants?"}, "no query"),
        (
            {"PLANTS_JWT_ISSUER": f"https://{'a' * 64}.example"},
            f"PLANTS_JWT_ISSUER must be an https:// URL, and '{'a' * 64}.example' is not a valid host name",
        ),
        ({"PLANTS_JWKS_URL": "https://idp..example/keys"}, "'idp..example' is not a valid host name"),
        # urlsplit passes over a space in a host and drops a tab or line end anywhere: each was
        # kept in the value, and every fetch of the keys failed (InvalidURL) with no start refused.
        ({"PLANTS_JWT_ISSUER": "https://idp .example/realms/plants"}, "no space or control character"),
        ({"PLANTS_JWT_ISSUER": "https://idp.example/realms/pl ants"}, "no space or control character"),
        (
            {"PLANTS_JWKS_URL": "https://idp.example/ke\nys"},
            "PLANTS_JWKS_URL must be an https:// URL with no space",
        ),
        (
            {"PLANTS_JWKS_URL": "ftp://idp.example/keys"},
            "PLANTS_JWKS_URL must be an https:// URL",
        ),
        ({"PLANTS_JWT_LEEWAY": 3601}, "at most 300 seconds"),
        ({"PLANTS_JWT_LEEWAY": -1}, "whole number >= 0"),
        ({"PLANTS_JWT_WRITE_SCOPE": "plants write"}, "one OAuth scope"),
        ({"PLANTS_JWT_READ_SCOPE": 'a"b'}, "one OAuth scope"),
        (
            {"PLANTS_JWT_ISSUER": None},
            "PLANTS_JWT_AUDIENCE is set, but PLANTS_JWT_ISSUER is not",
        ),
    ],
)
def test_settings_errors_are_one_line(settings, message):
    config = {
        "PLANTS_API_TOKENS": TOKEN,
        "PLANTS_JWT_ISSUER": "https://idp.example/realms/plants",
        "PLANTS_JWT_AUDIENCE": AUDIENCE,
        **settings,
    }
    with pytest.raises(ConfigurationError) as caught:
        create_app(config)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "settings",
    [
        {"PLANTS_JWT_ISSUER": "https://plants:S3cr3t@idp.example/realms/plants"},
        {"PLANTS_JWKS_URL": "https://plants:S3cr3t@idp.example/keys"},
        {"PLANTS_JWKS_URL": "https://S3cr3t@idp.example/keys"},
    ],
    ids=["issuer", "jwks-url", "jwks-url-user-alone"],
)
def test_a_provider_url_with_credentials_stops_the_start_without_showing_them(settings, caplog):
    """The keys are fetched without a URL's user and password, and the URL is written in the log
    of every fetch that fails: they would never serve, and would be shown in clear."""
    config = {"PLANTS_API_TOKENS": TOKEN, "PLANTS_JWT_ISSUER": "https://idp.example/realms/plants",
              "PLANTS_JWT_AUDIENCE": AUDIENCE, **settings}  # fmt: skip
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigurationError) as caught:
        create_app(config)
    assert "must hold no credentials" in str(caught.value)
    assert "S3cr3t" not in str(caught.value)
    assert "S3cr3t" not in caplog.text


def test_settings_from_the_environment(issuer, monkeypatch):
    monkeypatch.setenv("PLANTS_API_TOKENS", TOKEN)
    monkeypatch.setenv("PLANTS_JWT_ISSUER", issuer.url)
    monkeypatch.setenv("PLANTS_JWT_AUDIENCE", AUDIENCE)
    monkeypatch.setenv("PLANTS_JWT_LEEWAY", "0")
    monkeypatch.setenv("PLANTS_JWT_READ_SCOPE", "garden.read")
    monkeypatch.setenv("PLANTS_JWT_ALGORITHMS", "ES256")
    app = create_app()
    wait_until_ready(app)
    client = app.test_client()
    token = issuer.token(key=issuer.keys[1], scope="garden.read", exp=int(time.time()) - 1)
    refused(client.get("/plants", headers=bearer(token)), "the token has expired")
    assert (
        client.get(
            "/plants", headers=bearer(issuer.token(key=issuer.keys[1], scope="garden.read"))
        ).status_code
        == 200
    )
    monkeypatch.setenv("PLANTS_JWT_ALGORITHMS", "HS512")
    with pytest.raises(ConfigurationError, match=r"^PLANTS_JWT_ALGORITHMS may list only asymmetric"):
        create_app()


def test_an_issuer_with_spaces_around_it_is_the_issuer(issuer, monkeypatch):
    """As the audience is: an env file that keeps a trailing space (docker's `--env-file`), or a
    YAML block that ends in a line end, named an issuer no token's `iss` equals and a discovery
    URL that could not be fetched (InvalidURL), so every JWT was a 503 for good."""
    monkeypatch.setenv("PLANTS_API_TOKENS", TOKEN)
    monkeypatch.setenv("PLANTS_JWT_ISSUER", f" {issuer.url} \n")
    monkeypatch.setenv("PLANTS_JWT_AUDIENCE", AUDIENCE)
    app = create_app()
    try:
        wait_until_ready(app)
        answer = app.test_client().get("/plants", headers=bearer(issuer.token(scope="plants:read")))
        assert answer.status_code == 200, answer.json
    finally:
        plants_state(app).close()


def test_document_declares_the_scopes_when_an_issuer_is_set(issuer, client):
    document = client.get("/openapi.json").get_json()
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        **schemes["bearerAuth"],
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
    }
    assert schemes["openIdConnect"]["openIdConnectUrl"] == f"{issuer.url}/.well-known/openid-configuration"
    operations = {
        op["operationId"]: op
        for path in document["paths"].values()
        for op in path.values()
        if "operationId" in op
    }
    assert operations["addPlant"]["security"] == [{"bearerAuth": []}, {"openIdConnect": ["plants:write"]}]
    for write in ("deletePlant", "replacePlant", "patchPlant"):
        assert operations[write]["security"] == [{"bearerAuth": []}, {"openIdConnect": ["plants:write"]}]
    assert "security" not in operations["getPlant"]
    assert document["security"] == [{"bearerAuth": []}, {"openIdConnect": ["plants:read"]}]
    assert operations["healthz"]["security"] == []
    from openapi_spec_validator import validate

    validate(document)
    # The API page may read the provider's discovery document, and nothing else new.
    policy = client.get("/docs").headers["Content-Security-Policy"]
    assert f"connect-src 'self' {issuer.url};" in policy


def test_document_without_an_issuer_has_no_openid_scheme():
    app = create_app({"PLANTS_API_TOKENS": TOKEN})
    schemes = app.test_client().get("/openapi.json").get_json()["components"]["securitySchemes"]
    assert set(schemes) == {"bearerAuth"}
    assert "bearerFormat" not in schemes["bearerAuth"]


def test_metrics_count_refusals_by_reason(issuer, client):
    client.get("/plants", headers=bearer(issuer.token(exp=int(time.time()) - 100)))
    client.get("/plants", headers=bearer(issuer.token(exp=int(time.time()) - 100)))
    client.get("/plants", headers=bearer(issuer.token(headers={"kid": "nope"})))
    client.post("/plants", json=PLANT, headers=bearer(issuer.token(scope="plants:read")))
    client.get("/plants")
    text = client.get("/metrics", headers=bearer(TOKEN)).get_data(as_text=True)
    assert 'plants_auth_refusals_total{reason="expired"} 2.0' in text
    assert 'plants_auth_refusals_total{reason="unknown_key"} 1.0' in text
    assert 'plants_auth_refusals_total{reason="insufficient_scope"} 1.0' in text
    assert 'plants_auth_refusals_total{reason="missing"} 1.0' in text


def test_rate_limit_counts_per_subject_not_per_token(issuer, make_jwt_app):
    client = make_jwt_app(PLANTS_RATE_LIMIT="3/minute").test_client()
    for number in range(3):
        # A fresh token each time, for the same client: one budget.
        response = client.get("/plants", headers=bearer(issuer.token(jti=str(number))))
        assert response.status_code == 200
        assert response.headers["RateLimit-Remaining"] == str(2 - number)
    error_of(client.get("/plants", headers=bearer(issuer.token(jti="x"))), 429)
    # Another subject has its own.
    assert (
        client.get("/plants", headers=bearer(issuer.token(sub="client-9", client_id="client-9"))).status_code
        == 200
    )


def test_tokens_without_a_subject_each_have_their_own_budget(issuer, make_jwt_app):
    client = make_jwt_app(PLANTS_RATE_LIMIT="2/minute").test_client()
    first, second = (issuer.token(sub=None, client_id=None, jti=name) for name in "ab")
    assert [client.get("/plants", headers=bearer(first)).status_code for _ in range(3)] == [200, 200, 429]
    # Another client without a subject is not held back by the first one's requests.
    assert [client.get("/plants", headers=bearer(second)).status_code for _ in range(2)] == [200, 200]


def test_a_subjectless_tokens_padded_spelling_is_refused_not_a_budget_of_its_own(issuer, make_jwt_app):
    """RFC 7515 §2: a JWS's parts are base64url without `=` padding. PyJWT decodes a padded
    signature as the same one, so the token written twice would count as two tokens."""
    client = make_jwt_app(PLANTS_RATE_LIMIT="2/minute").test_client()
    token = issuer.token(sub=None, client_id=None)
    padded = token + "=" * (-len(token.rsplit(".", 1)[1]) % 4)
    assert padded != token
    assert [client.get("/plants", headers=bearer(token)).status_code for _ in range(2)] == [200, 200]
    refused(client.get("/plants", headers=bearer(padded)), "the token is malformed")
    error_of(client.get("/plants", headers=bearer(token)), 429)


# --- Through a real gunicorn ---------------------------------------------------------------------


def test_through_gunicorn_two_workers(issuer, redis_server):
    from tests.conftest import redis_settings
    from tests.helpers import assert_error, call
    from tests.servers import Gunicorn

    env = {
        **redis_settings(redis_server),
        "WEB_CONCURRENCY": "2",
        "PLANTS_JWT_ISSUER": issuer.url,
        "PLANTS_JWT_AUDIENCE": AUDIENCE,
    }
    server = Gunicorn(env=env)
    try:
        # Each worker loads the keys when it starts; on a loaded machine (the suite on both
        # cores) that has taken more than 10 s.
        deadline = time.monotonic() + 60
        # Each worker loads the keys; the master, which only checks the settings, fetches none.
        while call(server.connection(), "GET", "/readyz")[0] != 200 or issuer.fetches["jwks"] < 2:
            assert time.monotonic() < deadline, (issuer.fetches, server.output()[-3000:])
            time.sleep(0.05)
        writer, reader = issuer.token(), issuer.token(scope="plants:read")
        json_headers = {**bearer(writer), "Content-Type": "application/json"}
        for _ in range(4):  # over both workers
            assert call(server.connection(), "POST", "/plants", PLANT, json_headers)[0] == 200
            assert call(server.connection(), "GET", "/plants/7", None, bearer(reader))[0] == 200
        status, headers, body = call(
            server.connection(),
            "POST",
            "/plants",
            PLANT,
            {**bearer(reader), "Content-Type": "application/json"},
        )
        assert_error(status, headers, body, 403)
        assert headers["WWW-Authenticate"].endswith('scope="plants:write"')
        # A flood of random kids: at most one refetch per worker.
        before = issuer.fetches["jwks"]
        key = issuer.keys[0]
        for number in range(200):
            token = issuer.token(key=key, headers={"kid": f"flood-{number}"})
            status, headers, body = call(server.connection(), "GET", "/plants", None, bearer(token))
            assert_error(status, headers, body, 401)
        assert issuer.fetches["jwks"] - before <= 2, (before, issuer.fetches, server.output()[-3000:])
    finally:
        server.stop()
    output = server.output()
    assert writer not in output
    assert reader not in output
    assert writer.split(".")[2] not in output


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
def test_a_reload_while_the_provider_is_down_keeps_the_keys_its_workers_had(issuer, request, shared):
    """The new workers of a reload start with the keys their predecessors loaded (shared in the
    master's memory, app/auth/shared_keys.py): with the provider down they verify JWTs as the old
    ones did, and /readyz stays 200. Before, every JWT was 503 until the provider came back."""
    import signal
    from pathlib import Path

    from tests.conftest import redis_settings
    from tests.helpers import call
    from tests.servers import Gunicorn

    env = {"PLANTS_JWT_ISSUER": issuer.url, "PLANTS_JWT_AUDIENCE": AUDIENCE}
    if shared:
        env.update(redis_settings(request.getfixturevalue("redis_server")), WEB_CONCURRENCY="2")
    server = Gunicorn(env=env)
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    try:
        deadline = time.monotonic() + 60
        while call(server.connection(), "GET", "/readyz")[0] != 200:
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.05)
        token = issuer.token()
        issuer.down()
        old = set(children.read_text().split())
        server.process.send_signal(signal.SIGHUP)
        while True:  # every old worker gone, new ones in their place
            workers = set(children.read_text().split())
            if len(workers) == len(old) and not workers & old:
                break
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.05)
        for _ in range(4):  # over both workers
            assert call(server.connection(), "GET", "/plants", None, bearer(token))[0] == 200
            assert call(server.connection(), "GET", "/readyz")[0] == 200
    finally:
        server.stop()
        issuer.up()


def test_a_record_of_the_keys_left_torn_is_whole_again_at_the_next_refresh(issuer, monkeypatch):
    """A worker killed as it wrote the keys it shares leaves a record no worker reads (a later one
    would start without keys, every JWT 503 while the provider is down): the next refresh of any
    worker writes it whole again, though the provider's keys did not change."""
    import mmap

    from app.auth import shared_keys
    from app.auth.provider_fetch import FETCH_TIMEOUT

    shared = mmap.mmap(-1, shared_keys.SIZE)  # this test's own: the module's stays as it was
    monkeypatch.setattr(shared_keys, "_shared", shared)
    keys = _loading_keys(issuer.url)
    try:
        _wait_until(lambda: keys.loaded, lambda: "the keys were not loaded")
        record = shared[: shared_keys.SIZE]
        assert record.strip(b"\0")  # written at the first load
        shared[:32] = bytes(32)  # the digest as a write cut short leaves it
        assert keys.refresh(wait=FETCH_TIMEOUT)  # the same keys, fetched again
        assert shared[: shared_keys.SIZE] == record
    finally:
        keys.close()


def _loading_keys(issuer_url: str):
    """The keys of `issuer_url`, loading in the background as a worker's do."""
    from app.auth.jwks import KeySet

    keys = KeySet(discovery_url=f"{issuer_url}/.well-known/openid-configuration", jwks_url=None,
                  issuer=issuer_url)  # fmt: skip
    keys.start()
    return keys


def _wait_until(condition, explain, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, explain()
        time.sleep(0.02)


def test_a_provider_that_refuses_the_connection_is_logged_as_refused(caplog):
    with caplog.at_level(logging.WARNING):
        keys = _loading_keys(f"http://127.0.0.1:{free_port()}")  # nothing listens there
        _wait_until(lambda: "Could not fetch" in caplog.text, lambda: caplog.text)
    keys.close()
    assert "refused the connection (is the provider running at that address?)" in caplog.text
    assert "did not answer in time" not in caplog.text


def test_a_provider_named_by_a_host_name_is_fetched(issuer):
    """A name is looked up on a thread of its own (host_lookups.py), and each of its addresses
    tried in turn: `localhost` may name ::1 first, where the provider does not listen."""
    document, _, _ = in_time(
        lambda: provider_fetch.fetch_jwks("unused", f"http://localhost:{issuer.port}/jwks", "x")
    )
    assert [key["kid"] for key in document["keys"]] == [key.kid for key in issuer.keys]


def test_a_provider_that_trickles_its_tls_handshake_fails_at_the_deadline():
    """A provider (or whatever answers at its address) that sends the first record of its TLS
    handshake a byte at a time: each read finds a byte, the record is whole only hours later. The
    fetch's deadline covers the handshake too: it fails then, and does not hold its thread."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        peer, _ = listener.accept()
        with peer, contextlib.suppress(OSError):
            peer.recv(65536)  # the ClientHello
            peer.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KiB follows...
            while not stop.wait(0.2):
                peer.sendall(b"\x00")  # ...a byte at a time

    threading.Thread(target=trickle, daemon=True).start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/jwks"
    try:
        with pytest.raises(provider_fetch.FetchError, match="did not answer in time"):
            in_time(lambda: provider_fetch.fetch_jwks("unused", url, "x"))
    finally:
        stop.set()
        listener.close()


def test_a_jwks_uri_whose_host_is_no_dns_name_is_logged_and_the_loader_carries_on(issuer, caplog):
    """A provider's discovery document can name any jwks_uri: one that no resolver can be asked for
    is a fetch that failed, and the keys load once the provider mends its document."""
    issuer.jwks_uri = f"https://{'a' * 64}.example/jwks"
    logged_then_loaded_once_mended(
        issuer, caplog, "has a host name that is not a valid DNS name (UnicodeError)", "jwks_uri"
    )


@pytest.mark.parametrize(
    "jwks_uri",
    [
        "http://127.0.0.1:99999/jwks",
        "http://127.0.0.1:port/jwks",
        "http://keys .example/jwks",
        "http://[::1/jwks",
        "http://[xyz]/jwks",
    ],
)
def test_a_jwks_uri_that_is_no_url_to_fetch_is_logged_and_the_loader_carries_on(issuer, caplog, jwks_uri):
    """A port out of range or not a number, a host with a space, a bracket left open or holding no
    address (urlsplit's ValueError, which ended the loader: JWTs were 503 for good): the loader
    logs a failed fetch and loads the keys once the provider mends its document."""
    issuer.jwks_uri = jwks_uri
    logged_then_loaded_once_mended(issuer, caplog, "is not a URL this service can fetch", "jwks_uri")


def test_a_jwks_uri_as_long_as_a_document_is_logged_cut_short(issuer, caplog):
    """A jwks_uri is the provider's text, up to the discovery document's size: each failed fetch
    logs its first 200 characters, not a line as long as the document, once per retry."""
    issuer.jwks_uri = f"http://127.0.0.1:{free_port()}/" + "k" * 100_000  # nothing listens there
    logged_then_loaded_once_mended(issuer, caplog, "refused the connection", "jwks_uri")
    assert max(len(record.getMessage()) for record in caplog.records) < 1000


def logged_then_loaded_once_mended(issuer, caplog, logged: str, broken: str) -> None:
    """The keys' loader logs `logged`, then loads once the issuer's attribute `broken` is reset."""
    with caplog.at_level(logging.WARNING):
        keys = _loading_keys(issuer.url)
        _wait_until(lambda: "Could not fetch" in caplog.text, lambda: caplog.text)
        assert logged in caplog.text
        setattr(issuer, broken, None)
        _wait_until(lambda: keys.loaded, lambda: caplog.text)
    keys.close()


#: JSON nested deeper than the interpreter's recursion limit: json.loads raises RecursionError.
TOO_DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_document_nested_too_deep_is_a_failed_fetch_and_the_loader_carries_on(issuer, caplog):
    """A provider's answer is a stranger's text: JSON nested too deep to parse is logged like any
    other bad answer, and the keys load once the provider mends it (the loader thread lives on)."""
    issuer.raw = TOO_DEEP
    logged_then_loaded_once_mended(issuer, caplog, "did not answer JSON", "raw")


def test_an_unknown_kid_while_the_jwks_is_nested_too_deep_is_401(issuer, client):
    """The refetch an unknown `kid` makes runs in the request: a bad answer is a 401, not a 500,
    and the cached keys keep working."""
    assert client.get("/plants", headers=bearer(issuer.token())).status_code == 200
    issuer.raw = TOO_DEEP
    response = client.get("/plants", headers=bearer(issuer.token(key=SigningKey("EC"))))
    refused(response, "the token names no known signing key")
    assert client.get("/plants", headers=bearer(issuer.token(sub="client-4"))).status_code == 200


@pytest.mark.parametrize("published", [None, ("n", "e", "p", "q"), ("n", "e", "dp", "dq", "qi")])
def test_a_private_key_in_the_jwks_is_left_out_and_its_tokens_refused(
    issuer, make_jwt_app, caplog, published
):
    """A JWKS written by hand from the private JWK publishes `d` (or, cut down, only some of the
    private members: the primes alone give `d` away, and without `d` PyJWK loads the public key):
    anyone who read the document can sign with it. Its tokens are 401, never a 500 or a 200; the
    other keys keep working, and the log warns without the key's private part."""
    from jwt.algorithms import RSAAlgorithm

    leaked = issuer.keys[0]
    private = json.loads(RSAAlgorithm.to_jwk(leaked.private))
    if published is not None:
        private = {member: private[member] for member in ("kty", *published)}
    leaked.jwk = {**private, "kid": leaked.kid, "use": "sig"}
    with caplog.at_level(logging.WARNING):
        client = make_jwt_app(PLANTS_JWT_ALGORITHMS="RS256,ES256").test_client()
        refused(client.get("/plants", headers=bearer(issuer.token())), "the token names no known signing key")
    assert client.get("/plants", headers=bearer(issuer.token(key=issuer.keys[1]))).status_code == 200
    assert "publishes a private key" in caplog.text
    secrets = [private[member] for member in ("d", "p", "q", "dp", "dq", "qi") if member in private]
    assert secrets
    assert not [secret for secret in secrets if secret in caplog.text]


def test_a_private_key_is_warned_of_once_not_at_every_refresh(issuer, caplog):
    """Every refresh reads the JWKS again: the WARNING names each private key once a process."""
    from jwt.algorithms import RSAAlgorithm

    from app.auth.jwks import KeySet

    leaked = issuer.keys[0]
    leaked.jwk = {**json.loads(RSAAlgorithm.to_jwk(leaked.private)), "kid": leaked.kid}
    keys = KeySet(discovery_url="unused", jwks_url=f"{issuer.url}/jwks", issuer=issuer.url)
    with caplog.at_level(logging.WARNING, logger="app.auth.jwks"):
        for _ in range(3):
            assert keys.refresh()
        second = SigningKey("RSA", number=2)
        second.jwk = {**json.loads(RSAAlgorithm.to_jwk(second.private)), "kid": second.kid}
        issuer.keys.append(second)
        for _ in range(2):
            assert keys.refresh()
    messages = [record.getMessage() for record in caplog.records]
    warned = [message for message in messages if "publishes a private key" in message]
    assert len(warned) == 2, warned
    assert leaked.kid in warned[0]
    assert second.kid in warned[1]


@pytest.mark.parametrize(
    ("published", "verifies"),
    [
        ({"use": "enc"}, False),  # RFC 7517 §4.2: for encryption only
        ({"use": None, "key_ops": ["encrypt", "wrapKey"]}, False),  # §4.3: no `verify`
        ({"use": None, "key_ops": ["sign"]}, False),
        ({"use": None, "key_ops": "verify"}, False),  # not an array: not a key this service trusts
        ({"use": None, "key_ops": ["verify"]}, True),
        ({"use": None}, True),  # neither member: any use
    ],
    ids=["use-enc", "ops-encrypt", "ops-sign", "ops-not-a-list", "ops-verify", "neither"],
)
def test_a_key_verifies_only_as_its_use_and_key_ops_allow(issuer, make_jwt_app, published, verifies):
    key = issuer.keys[0]
    key.jwk = {name: value for name, value in {**key.jwk, **published}.items() if value is not None}
    client = make_jwt_app(PLANTS_JWT_ALGORITHMS="RS256,ES256").test_client()
    response = client.get("/plants", headers=bearer(issuer.token()))
    if verifies:
        assert response.status_code == 200
    else:
        refused(response, "the signing algorithm is not allowed")
    assert client.get("/plants", headers=bearer(issuer.token(key=issuer.keys[1]))).status_code == 200


def test_the_masters_settings_check_starts_no_thread_and_asks_the_provider_nothing(issuer, tmp_path):
    """gunicorn's master checks the settings, then forks the workers: it builds no app, so no
    fetch of the keys (nor any other thread) runs at the fork for a worker to inherit half done."""
    issuer.hanging = True  # a fetch, if one were made, would still be running at the fork
    script = (
        "import logging, threading, types\n"
        "from gunicorn.config import Config\n"
        "from app.server import gunicorn_conf\n"
        "cfg = Config()\n"
        "cfg.set('workers', 1)\n"
        "cfg.set('bind', [])\n"
        "gunicorn_conf.on_starting(types.SimpleNamespace(cfg=cfg, log=logging.getLogger('master')))\n"
        "print(sorted(thread.name for thread in threading.enumerate()))\n"
    )
    env = {**os.environ, "PLANTS_API_TOKENS": TOKEN, "PLANTS_JWT_ISSUER": issuer.url,
           "PLANTS_JWT_AUDIENCE": AUDIENCE, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "['MainThread']"
    assert issuer.fetches["discovery"] == 0


@pytest.mark.parametrize(
    ("scope", "allowed"),
    [
        ("plants:webhooks", True),
        ("plants:write", False),
        ("plants:read plants:write", False),
        ("plants:read", False),
    ],
)
def test_webhooks_need_their_own_scope(issuer, make_jwt_app, scope, allowed):
    """Endpoints hold signing secrets: the write scope does not reach them, the webhooks scope does."""
    client = make_jwt_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False
    ).test_client()
    headers = bearer(issuer.token(scope=scope))
    for method, path, body, ok in [
        ("POST", "/webhooks", {"url": "http://127.0.0.1:9/hook"}, 201),
        ("GET", "/webhooks", None, 200),
    ]:
        response = client.open(path, method=method, json=body, headers=headers)
        if allowed:
            assert response.status_code == ok, response.json
        else:
            assert "plants:webhooks" in error_of(response, 403)["message"]
            assert response.headers["WWW-Authenticate"] == (
                'Bearer realm="plants", error="insufficient_scope", scope="plants:webhooks"'
            )


def test_the_document_names_the_webhooks_scope_on_the_webhooks_operations(issuer, client):
    document = client.get("/openapi.json").json
    scheme = {"openIdConnect": ["plants:webhooks"]}
    assert scheme in document["paths"]["/webhooks"]["post"]["security"]
    assert scheme in document["paths"]["/webhooks/{endpoint_id}"]["get"]["security"]
    assert {"openIdConnect": ["plants:write"]} in document["paths"]["/plants"]["post"]["security"]


def test_the_document_names_each_operations_scope_on_its_head_and_on_the_ticket_mint(issuer, client):
    """A HEAD of a webhooks read needs the webhooks scope, as its GET; a read JWT mints a ticket."""
    document = client.get("/openapi.json").json
    webhooks = [{"bearerAuth": []}, {"openIdConnect": ["plants:webhooks"]}]
    for path in ("/webhooks", "/webhooks/{endpoint_id}", "/webhooks/{endpoint_id}/attempts"):
        assert document["paths"][path]["head"]["security"] == webhooks
    mint = document["paths"]["/events/tickets"]["post"]
    assert mint["security"] == [{"bearerAuth": []}, {"openIdConnect": ["plants:read"]}]
    headers = bearer(issuer.token(scope="plants:read"))
    assert client.post("/events/tickets", headers=headers).status_code == 200
    assert client.head("/webhooks", headers=headers).status_code == 403


def test_an_issuer_with_a_trailing_slash_is_logged_with_both_values(issuer, make_jwt_app, caplog):
    """PLANTS_JWT_ISSUER with a slash the provider's `issuer` lacks: the line names both."""
    with caplog.at_level(logging.WARNING):
        app = make_jwt_app(wait=False, PLANTS_JWT_ISSUER=issuer.url + "/")
        _wait_until(lambda: "names the issuer" in caplog.text, lambda: caplog.text)
    app.extensions["plants"].auth.close()
    assert (
        f"names the issuer {issuer.url!r}, not PLANTS_JWT_ISSUER {issuer.url + '/'!r}: they must be"
        " equal character for character, trailing slash included"
    ) in caplog.text
