"""The static bearer tokens: each list from its setting, else from the lines of its `_FILE`."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from marshmallow import ValidationError

from app.settings.configuration_error import ConfigurationError
from app.settings.fields import check_rate_limit

# RFC 6750 §2.1 b64token: the only characters a bearer token can have.
TOKEN_SYNTAX = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
#: Longest accepted token: "Authorization: Bearer <token>" must fit the 8 KiB header-line limit
#: of gunicorn (limit_request_field_size, 8190) and of nginx (large_client_header_buffers 8k).
MAX_TOKEN_LENGTH = 4096
#: Largest `_FILE` setting's file read: thousands of tokens, and no more than a master should hold.
MAX_SECRET_FILE_BYTES = 1 << 20

#: Each `_FILE` setting's file, by path, as gunicorn's master last accepted it (at its start, or
#: at a reload it let through: app/server/reload_gate.py). Its workers are forked from it, so
#: they read these rather than the file: a worker that replaces one that died (SIGKILL, a
#: timeout) serves the tokens its siblings serve, and boots even when the file has been emptied
#: or broken since (a worker that fails to boot stops gunicorn's master, and every worker).
_accepted: dict[str, str] = {}
#: While the master checks the settings: the files read from disk, by path.
_checking: dict[str, str] | None = None


class TokenSettings(NamedTuple):
    #: Tokens that may create and delete as well as read (PLANTS_API_TOKENS).
    full: tuple[str, ...]
    #: Tokens that may only read (PLANTS_READ_TOKENS).
    read_only: tuple[str, ...]
    #: The tokens given a rate limit of their own (`token@limit`), of either kind.
    limits: dict[str, str]


def token_settings(values: Mapping[str, Any], *, required: bool = True) -> TokenSettings:
    """The accepted bearer tokens, full and read-only, and the ones with a rate limit of their own.

    Fails closed: raises ConfigurationError when no full-access token is configured (unless not
    `required`: JWT access tokens are on), and when a token is in both lists.
    """
    full, limits, full_key, _ = _token_list(values, "PLANTS_API_TOKENS")
    if not full and required and values.get("PLANTS_API_TOKENS") is not None:
        # Set, to entries that are all empty ([""], ","): not the same mistake as unset.
        raise ConfigurationError(
            "PLANTS_API_TOKENS",
            "is set but holds no token (it has no entry, or only empty ones): list one or more tokens, "
            "comma-separated, or unset it and use {PLANTS_API_TOKENS_FILE} or {PLANTS_JWT_ISSUER}",
        )
    if not full and required:
        raise ConfigurationError(
            "PLANTS_API_TOKENS",
            "is not set, and no API token is configured: set it (comma-separated tokens) "
            "or {PLANTS_API_TOKENS_FILE} (a file with one token per line), or turn on JWT access "
            "tokens with {PLANTS_JWT_ISSUER}. There is no default token.",
        )
    read_only, read_limits, read_key, read_places = _token_list(values, "PLANTS_READ_TOKENS")
    both = set(full) & set(read_only)
    if both:
        where = next(where for where, token in zip(read_places, read_only, strict=True) if token in both)
        raise ConfigurationError(
            read_key,
            f"has a token ({where}) that is also in {{{full_key}}}: a token is either "
            "full-access or read-only, so remove it from one of the two",
        )
    return TokenSettings(full, read_only, {**limits, **read_limits})


@contextlib.contextmanager
def files_read() -> Iterator[dict[str, str]]:
    """Within: each `_FILE` setting's file is read from disk, not as accepted, and collected into
    the dict yielded (path: content), for `accept_files`."""
    global _checking
    collected: dict[str, str] = {}
    previous, _checking = _checking, collected
    try:
        yield collected
    finally:
        _checking = previous


def accept_files(contents: Mapping[str, str]) -> None:
    """The files' contents that this process, and every process forked from it from now on, reads."""
    _accepted.clear()
    _accepted.update(contents)


def read_secret_file(key: str, path: str) -> str:
    """The content of the file a `_FILE` setting names (as accepted, if it was: `accept_files`);
    ConfigurationError when it cannot be read."""
    if _checking is None and path in _accepted:
        return _accepted[path]
    content = _read_secret_file(key, path)
    if _checking is not None:
        _checking[path] = content
    return content


def _read_secret_file(key: str, path: str) -> str:
    """The content of the file a `_FILE` setting names; ConfigurationError when it cannot be read.

    The master reads it again on each reload, in its signal handler: a named pipe would hold the
    master in `open()` until a writer came (no reload, no stop, no reaping meanwhile), and a link
    to /dev/zero would fill its memory. So only a regular file (a link to one, as a mounted
    Secret's, is fine) of at most MAX_SECRET_FILE_BYTES is read, opened without blocking.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as file:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise ConfigurationError(key, f"names what is not a regular file: {path!r}")
            content = file.read(MAX_SECRET_FILE_BYTES + 1)
        if len(content) > MAX_SECRET_FILE_BYTES:
            raise ConfigurationError(
                key, f"names a file larger than {MAX_SECRET_FILE_BYTES // 1024} KiB: {path!r}"
            )
        return content.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            key, f"names a file that cannot be read ({exc.__class__.__name__}): {path!r}"
        ) from None


def _token_list(
    values: Mapping[str, Any], key: str
) -> tuple[tuple[str, ...], dict[str, str], str, tuple[str, ...]]:
    """The tokens of `key` (else of `key`_FILE, one per line), their own rate limits, the key they
    were read from, and where each stands in it (`line 3` of a file, `number 2` of a list)."""
    entries = values.get(key) or ()
    if not entries and values.get(f"{key}_FILE"):
        key = f"{key}_FILE"
        # A line whose first character other than a space is `#` is a comment (whose token this
        # is, one retired): `#` is no bearer token's character, so no token is read as one. It
        # keeps its place, as an empty line does, so that a refusal names the line it means.
        lines = read_secret_file(key, values[key]).splitlines()
        entries = tuple("" if line.strip().startswith("#") else line.strip() for line in lines)
        if not any(entries):
            # Named, yet empty: a file caught mid-rewrite, whose tokens would all stop working
            # (the read-only ones, or every static one beside JWTs, with no other error).
            raise ConfigurationError(
                key,
                "names a file with no token in it (only empty or comment lines): write one token"
                " a line, or unset it",
            )
    # A file's entry is named by its line (empty lines count), a list's by its place.
    in_file = key.endswith("_FILE")
    parts = [(place, entry.partition("@")) for place, entry in enumerate(entries, start=1) if entry]
    pairs = [(token, limit) for _, (token, _, limit) in parts]
    limits = {}
    places = tuple(f"line {place}" if in_file else f"number {place}" for place, _ in parts)
    for where, (place, (token, at, limit)) in zip(places, parts, strict=True):
        if at and not limit.strip():
            # `token@` is a limit left out, not a token: '@' is no bearer token's character.
            raise ConfigurationError(
                key,
                f"has a token ({where}) followed by '@' but no rate limit: write one "
                "(token@100/second) or drop the '@'",
            )
        if not TOKEN_SYNTAX.fullmatch(token):
            raise ConfigurationError(
                key,
                f"has a token ({where}) that is not a valid bearer token: "
                "use only A-Z a-z 0-9 - . _ ~ + / and trailing '='"
                + (" (a comment is a line of its own, starting with #)" if in_file else ""),
            )
        if len(token) > MAX_TOKEN_LENGTH:
            raise ConfigurationError(
                key,
                f"has a token ({where}) of {len(token)} characters, which no request could "
                f"carry through the HTTP server's 8 KiB header limit: tokens may have at most "
                f"{MAX_TOKEN_LENGTH} characters",
            )
        if limit:
            named = f"the token on line {place}" if in_file else f"token number {place}"
            try:
                check_rate_limit(limit, f"has a rate limit for {named} that is not")
            except ValidationError as exc:
                raise ConfigurationError(key, str(exc.messages[0])) from None
            limits[token] = limit
    return tuple(token for token, _ in pairs), limits, key, places
