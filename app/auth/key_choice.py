"""Which of the identity provider's keys verifies a token: the key its `kid` names, or without a
`kid` the only one, whose type, curve, `alg`, `use` and `key_ops` fit the token's algorithm."""

from __future__ import annotations

from typing import Any, NamedTuple

from jwt import PyJWK

#: Which key types sign with which algorithms (RFC 7518 §3.1, RFC 8037): a token whose algorithm
#: does not fit its key's type is refused, whatever the algorithm list says.
KEY_FAMILIES = {
    "RS256": ("RSA", None), "RS384": ("RSA", None), "RS512": ("RSA", None),
    "PS256": ("RSA", None), "PS384": ("RSA", None), "PS512": ("RSA", None),
    "ES256": ("EC", "P-256"), "ES384": ("EC", "P-384"), "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", None),
}  # fmt: skip


class SigningKey(NamedTuple):
    """One usable key of the provider's JWKS, and its JWK as published (PyJWK keeps that only
    privately, and `fits` reads its `crv` and whether it names an `alg`)."""

    jwk: PyJWK
    data: dict[str, Any]


def fits(key: SigningKey, algorithm: str) -> bool:
    """Whether `key` may verify a signature made with `algorithm`: its type (and curve) and its
    `alg` fit, its `use` is `sig` (RFC 7517 §4.2: an `enc` key is for encryption) and its
    `key_ops` name `verify` (§4.3), each when it has them."""
    kty, crv = KEY_FAMILIES.get(algorithm, (None, None))
    data = key.data
    if kty is None or data.get("kty") != kty or (crv is not None and data.get("crv") != crv):
        return False
    operations = data.get("key_ops", ["verify"])
    verifies = isinstance(operations, list) and "verify" in operations
    return verifies and data.get("alg", algorithm) == algorithm and data.get("use", "sig") == "sig"


def match(keys: list[SigningKey], kid: str | None, algorithm: str) -> tuple[PyJWK | None, bool]:
    """Of `keys`, the one `kid` names that fits `algorithm`, or without `kid` the one key that
    fits, if there is exactly one; and whether `kid` names any (or, without it, any fits)."""
    if kid is None:
        fitting = [key.jwk for key in keys if fits(key, algorithm)]
        return (fitting[0] if len(fitting) == 1 else None), bool(fitting)
    named = [key for key in keys if key.jwk.key_id == kid]
    return next((key.jwk for key in named if fits(key, algorithm)), None), bool(named)
