"""Settings: tokens from config, environment and file; failing closed; validation."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from flask import Flask

from app import ConfigurationError, create_app
from app.extension import plants_state
from app.plants import bp
from app.server.settings_check import summary
from app.settings import from_environ, load_settings, store_location
from app.store import StoreUrl
from tests.servers import ROOT, TOKEN, Gunicorn, free_port, wait_until_serving

SETTINGS = (
    "PLANTS_API_TOKENS",
    "PLANTS_API_TOKENS_FILE",
    "PLANTS_READ_TOKENS",
    "PLANTS_READ_TOKENS_FILE",
    "MAX_CONTENT_LENGTH",
    "PLANTS_MAX_PLANTS",
    "PLANTS_TRUSTED_PROXIES",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for key in SETTINGS:
        monkeypatch.delenv(key, raising=False)


def api_tokens(config):
    """The full-access tokens that `config` (an app.config) sets."""
    return load_settings(config).tokens.full


def authorized(app, token):
    response = app.test_client().post(
        "/plants", json={"id": 1, "name": "Fern"}, headers={"Authorization": f"Bearer {token}"}
    )
    return response.status_code == 200


@pytest.mark.parametrize(
    "config", [None, {}, {"PLANTS_API_TOKENS": ""}, {"PLANTS_API_TOKENS": " , ,"}, {"PLANTS_API_TOKENS": []}]
)
def test_no_token_fails_closed_naming_the_setting(config):
    with pytest.raises(ConfigurationError, match="PLANTS_API_TOKENS"):
        create_app(config)


def test_tokens_from_environment(monkeypatch):
    monkeypatch.setenv("PLANTS_API_TOKENS", "alpha, beta,,")
    app = create_app()
    assert authorized(app, "alpha")
    assert authorized(app, "beta")


def test_config_overrides_environment(monkeypatch):
    monkeypatch.setenv("PLANTS_API_TOKENS", "from-env")
    monkeypatch.setenv("PLANTS_MAX_PLANTS", "5")
    app = create_app({"PLANTS_API_TOKENS": ["from-config"]})
    assert not authorized(app, "from-env")
    assert authorized(app, "from-config")
    assert app.extensions["plants"].store.capacity == 5


def test_tokens_from_file_when_tokens_unset(tmp_path, monkeypatch):
    path = tmp_path / "tokens"
    path.write_text("\n  file-token-1  \n\nfile-token-2\n")
    monkeypatch.setenv("PLANTS_API_TOKENS_FILE", str(path))
    assert api_tokens(from_environ()) == ("file-token-1", "file-token-2")
    assert authorized(create_app(), "file-token-2")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("tok-one\n\n# the dashboard's\ntok two\n", "has a token (line 4) that is not a valid bearer token"),
        ("tok-one\n\ntok-two@\n", "has a token (line 3) followed by '@' but no rate limit"),
        ("\ntok-one@often\n", "has a rate limit for the token on line 2 that is not a rate limit"),
    ],
    ids=["not-a-token", "no-limit", "bad-limit"],
)
def test_a_bad_entry_of_a_token_file_is_named_by_its_line(tmp_path, content, says):
    """A file's refusal counted its non-empty lines (`token (number 2)` for the third line, after
    an empty one), so the operator looked at the wrong line: it names the line."""
    path = tmp_path / "tokens"
    path.write_text(content)
    with pytest.raises(ConfigurationError) as refused:
        api_tokens({"PLANTS_API_TOKENS_FILE": str(path)})
    assert f'PLANTS_API_TOKENS_FILE"] {says}' in str(refused.value)


def test_a_token_file_takes_comment_lines_and_empty_ones(tmp_path):
    """A mounted secret's file often says whose each token is: a line whose first character other
    than a space is `#` is a comment (`#` is no bearer token's character). Its lines keep their
    numbers in a refusal."""
    path = tmp_path / "tokens"
    path.write_text("# Plant Store tokens\n\n  # the dashboard's\ntok-one\n#tok-retired\ntok-two@10/second\n")
    assert api_tokens({"PLANTS_API_TOKENS_FILE": str(path)}) == ("tok-one", "tok-two")
    path.write_text("# the dashboard's\ntok-one\n\ntok two\n")
    with pytest.raises(ConfigurationError, match=r"has a token \(line 4\) that is not a valid bearer token"):
        api_tokens({"PLANTS_API_TOKENS_FILE": str(path)})


def test_a_comment_after_a_token_is_refused_saying_a_comment_is_a_line_of_its_own(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("tok-one  # the dashboard's\n")
    with pytest.raises(ConfigurationError) as refused:
        api_tokens({"PLANTS_API_TOKENS_FILE": str(path)})
    assert str(refused.value).endswith(
        "has a token (line 1) that is not a valid bearer token: use only A-Z a-z 0-9 - . _ ~ + / and"
        " trailing '=' (a comment is a line of its own, starting with #)"
    )
    assert "dashboard" not in str(refused.value)
    with pytest.raises(ConfigurationError) as listed:
        api_tokens({"PLANTS_API_TOKENS": "tok-one,#tok-two"})
    assert "comment" not in str(listed.value)  # a list has no comments


def test_a_token_file_of_comments_alone_has_no_token(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# tokens go here, one a line\n\n")
    with pytest.raises(ConfigurationError) as refused:
        api_tokens({"PLANTS_API_TOKENS_FILE": str(path)})
    assert "names a file with no token in it (only empty or comment lines)" in str(refused.value)


def test_tokens_take_precedence_over_file(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("file-token\n")
    assert api_tokens({"PLANTS_API_TOKENS": "direct", "PLANTS_API_TOKENS_FILE": str(path)}) == ("direct",)


def test_unreadable_or_empty_token_file_fails_closed(tmp_path):
    with pytest.raises(ConfigurationError, match="PLANTS_API_TOKENS_FILE"):
        api_tokens({"PLANTS_API_TOKENS_FILE": str(tmp_path / "missing")})
    (tmp_path / "empty").write_text("\n\n")
    with pytest.raises(ConfigurationError, match="PLANTS_API_TOKENS"):
        api_tokens({"PLANTS_API_TOKENS_FILE": str(tmp_path / "empty")})


def test_invalid_token_is_refused_without_being_shown():
    with pytest.raises(ConfigurationError) as info:
        api_tokens({"PLANTS_API_TOKENS": "good,sec ret"})
    assert "sec ret" not in str(info.value)
    assert "number 2" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("PLANTS_LOG_FORMAT", "yaml"),
        ("PLANTS_STORE_PREFIX", "{plants}"),
        ("PLANTS_JWT_READ_SCOPE", "read plants"),
    ],
)
def test_a_refused_text_setting_names_the_value_it_refused(monkeypatch, key, value):
    # The line says what was read, as every other refusal does: a typo is found at a glance.
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match=key) as info:
        create_app()
    assert f"not {value!r}" in str(info.value)


@pytest.mark.parametrize("value", ["{", "}", "{0}", "{x.y}", "{PLANTS_STORE_URL"])
def test_a_refused_value_with_braces_is_quoted_as_it_is(monkeypatch, value):
    # A message names settings as `{KEY}`: a value quoted in it is no template (a `{` ended the
    # start in a traceback instead of the one line).
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv("PLANTS_MAX_PLANTS", value)
    with pytest.raises(ConfigurationError) as info:
        create_app()
    assert str(info.value) == f"PLANTS_MAX_PLANTS must be a whole number, not {value!r}"


def test_a_refused_path_with_braces_is_quoted_as_it_is(tmp_path):
    directory = tmp_path / "{tokens}"
    directory.mkdir()
    with pytest.raises(ConfigurationError) as info:
        create_app({"PLANTS_API_TOKENS_FILE": str(directory)})
    assert repr(str(directory)) in str(info.value)


def test_a_refused_store_url_is_not_shown(monkeypatch):
    # It may hold a password: the refusal names the setting only.
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv("PLANTS_STORE_URL", "redis://:s3cret-pw@host:6379/0?password=x")
    with pytest.raises(ConfigurationError, match="PLANTS_STORE_URL") as info:
        create_app()
    assert "s3cret-pw" not in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("PLANTS_MAX_PLANTS", "many"), ("MAX_CONTENT_LENGTH", "1.5"), ("PLANTS_TRUSTED_PROXIES", "yes")],
)
def test_non_integer_setting_in_environment_is_refused(monkeypatch, key, value):
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match=key):
        create_app()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("PLANTS_MAX_PLANTS", -1),
        # 0 would start a store that refuses every create, where a reader may take 0 for "no limit".
        ("PLANTS_MAX_PLANTS", 0),
        ("MAX_CONTENT_LENGTH", 0),
        ("PLANTS_TRUSTED_PROXIES", True),
        # Past a signed 64-bit integer: Redis refused every write's trim of the feed with it.
        ("PLANTS_EVENTS_RETAIN", 2**63),
        ("PLANTS_MAX_PLANTS", 10**23),
    ],
)
def test_out_of_range_setting_is_refused(key, value):
    with pytest.raises(ConfigurationError, match=key):
        create_app({"PLANTS_API_TOKENS": "t", key: value})


def test_a_longest_wait_above_the_wait_parameters_bound_is_refused(monkeypatch):
    """PLANTS_EVENTS_MAX_WAIT only lowers a long-poll's 55 s: a larger value stops the start
    rather than being taken and doing nothing."""
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv("PLANTS_EVENTS_MAX_WAIT", "120")
    with pytest.raises(ConfigurationError, match=r"PLANTS_EVENTS_MAX_WAIT must be at most 55 seconds"):
        create_app()
    monkeypatch.setenv("PLANTS_EVENTS_MAX_WAIT", "55")
    assert create_app().extensions["plants"].settings.events_max_wait == 55


@pytest.mark.parametrize(
    ("key", "text", "said"),
    [
        ("PLANTS_EVENTS_MAX_WAIT", "56", "must be at most 55 seconds, not 56"),
        ("PLANTS_EVENTS_MAX_WAIT", "1e400", "must be at most 55 seconds, not 1e400"),
        ("PLANTS_STORE_TIMEOUT", "0", "must be a number of seconds above 0, not 0"),
        ("PLANTS_WEBHOOKS_TIMEOUT", " -0.50 ", "must be a number of seconds above 0, not -0.50"),
        ("PLANTS_WEBHOOKS_RETRY_SCALE", "0", "must be a number from 0.00001 to 1, not 0"),
        ("PLANTS_WEBHOOKS_RETRY_SCALE", "2", "must be a number from 0.00001 to 1, not 2"),
        ("PLANTS_EVENTS_HEARTBEAT", "3601", "must be at most 3600 seconds, not 3601"),
        ("PLANTS_JWT_LEEWAY", "1_000", "must be at most 300 seconds, not 1_000"),
        ("MAX_CONTENT_LENGTH", "0", "must be a whole number >= 1, not 0"),
    ],
)
def test_a_number_refused_from_the_environment_is_quoted_as_written(monkeypatch, key, text, said):
    """The message quotes the variable's value as its reader wrote it: `56`, not the `56.0` it was
    read as, nor `inf` for `1e400`."""
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv(key, text)
    with pytest.raises(ConfigurationError) as raised:
        create_app()
    assert str(raised.value) == f"{key} {said}"


def test_a_number_taken_from_the_environment_is_stated_as_the_number_it_is(monkeypatch):
    """Only a refusal quotes the text as written: an answer that states the setting states the number."""
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv("MAX_CONTENT_LENGTH", "1_000")
    client = create_app().test_client()
    headers = {"Authorization": "Bearer t", "Content-Type": "application/json"}
    response = client.post("/plants", data=b"x" * 2000, headers=headers)
    assert response.status_code == 413
    assert response.json["message"] == "The request body is larger than the limit of 1000 bytes."


def test_max_content_length_from_environment(monkeypatch):
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv("MAX_CONTENT_LENGTH", "100")
    app = create_app()
    response = app.test_client().post(
        "/plants", json={"id": 1, "name": "x" * 100}, headers={"Authorization": "Bearer t"}
    )
    assert response.status_code == 413


def test_trusted_proxies_apply_proxy_fix():
    app = create_app({"PLANTS_API_TOKENS": "t", "PLANTS_TRUSTED_PROXIES": 1})

    @app.get("/whoami")
    def whoami():
        from flask import request

        return {"addr": request.remote_addr, "scheme": request.scheme}

    headers = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    response = app.test_client().get("/whoami", headers=headers, environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert response.json == {"addr": "203.0.113.9", "scheme": "https"}

    untrusted = create_app({"PLANTS_API_TOKENS": "t"})
    untrusted.add_url_rule("/whoami", view_func=whoami)
    response = untrusted.test_client().get(
        "/whoami", headers=headers, environ_base={"REMOTE_ADDR": "127.0.0.1"}
    )
    assert response.json == {"addr": "127.0.0.1", "scheme": "http"}


def read(app, token):
    return app.test_client().get("/plants", headers={"Authorization": f"Bearer {token}"}).status_code


def test_read_tokens_from_environment_and_file(monkeypatch, tmp_path):
    monkeypatch.setenv("PLANTS_API_TOKENS", "writer")
    monkeypatch.setenv("PLANTS_READ_TOKENS", "reader-a, reader-b")
    app = create_app()
    assert [read(app, token) for token in ("writer", "reader-a", "reader-b", "other")] == [200, 200, 200, 401]
    assert not authorized(app, "reader-a")
    assert authorized(app, "writer")
    monkeypatch.delenv("PLANTS_READ_TOKENS")
    path = tmp_path / "readers"
    path.write_text("file-reader\n\n")
    monkeypatch.setenv("PLANTS_READ_TOKENS_FILE", str(path))
    app = create_app()
    assert read(app, "file-reader") == 200
    assert (
        app.test_client().delete("/plants/1", headers={"Authorization": "Bearer file-reader"}).status_code
        == 403
    )


def test_a_token_in_both_lists_is_a_startup_error_that_does_not_show_it(monkeypatch):
    monkeypatch.setenv("PLANTS_API_TOKENS", "shared-secret,writer")
    monkeypatch.setenv("PLANTS_READ_TOKENS", "reader,shared-secret")
    with pytest.raises(ConfigurationError) as raised:
        create_app()
    message = str(raised.value)
    assert message.startswith("PLANTS_READ_TOKENS has a token (number 2) that is also in PLANTS_API_TOKENS")
    assert "shared-secret" not in message
    assert "\n" not in message


def test_a_token_in_both_files_is_named_by_the_files_and_its_line(tmp_path, monkeypatch):
    """From the two files it said `PLANTS_READ_TOKENS has a token (number 2) that is also in
    PLANTS_API_TOKENS`: neither variable was set, and the token was on the file's third line."""
    (tmp_path / "api").write_text("shared-secret\nwriter\n")
    (tmp_path / "read").write_text("reader\n\nshared-secret\n")
    monkeypatch.setenv("PLANTS_API_TOKENS_FILE", str(tmp_path / "api"))
    monkeypatch.setenv("PLANTS_READ_TOKENS_FILE", str(tmp_path / "read"))
    with pytest.raises(ConfigurationError) as raised:
        create_app()
    message = str(raised.value)
    assert message.startswith(
        "PLANTS_READ_TOKENS_FILE has a token (line 3) that is also in PLANTS_API_TOKENS_FILE"
    )
    assert "shared-secret" not in message


def test_read_tokens_are_checked_like_full_ones():
    with pytest.raises(
        ConfigurationError, match=r"^PLANTS_READ_TOKENS has a token \(number 1\) that is not a valid"
    ):
        create_app({"PLANTS_API_TOKENS": "writer", "PLANTS_READ_TOKENS": ["bad token"]})
    with pytest.raises(ConfigurationError, match="PLANTS_READ_TOKENS_FILE names a file that cannot be read"):
        create_app({"PLANTS_API_TOKENS": "writer", "PLANTS_READ_TOKENS_FILE": "/nonexistent/readers"})


@pytest.mark.parametrize("key", ["PLANTS_API_TOKENS_FILE", "PLANTS_READ_TOKENS_FILE"])
def test_a_named_token_file_without_a_token_is_refused(tmp_path, key):
    # An emptied file (one caught mid-rewrite) took every read-only token away without an error,
    # and a reload let it through: PLANTS_READ_TOKENS is never required.
    path = tmp_path / "tokens"
    path.write_text("\r\n  \n")
    with pytest.raises(ConfigurationError, match=f"^{key} names a file with no token in it"):
        create_app({"PLANTS_API_TOKENS": "writer", key: str(path)} if "READ" in key else {key: str(path)})


def test_the_store_url_comes_from_its_file_when_the_url_is_unset(tmp_path, monkeypatch):
    with pytest.raises(ConfigurationError, match=r"^PLANTS_STORE_URL_FILE names a file that cannot be read"):
        create_app({"PLANTS_API_TOKENS": "t", "PLANTS_STORE_URL_FILE": str(tmp_path / "missing")})
    path = tmp_path / "url"
    path.write_text("mysql://db/plants\n")
    monkeypatch.setenv("PLANTS_STORE_URL_FILE", str(path))
    with pytest.raises(ConfigurationError, match=r"^PLANTS_STORE_URL_FILE has scheme 'mysql'"):
        create_app({"PLANTS_API_TOKENS": "t"})
    # The URL itself, when set, wins over the file.
    assert (
        not create_app({"PLANTS_API_TOKENS": "t", "PLANTS_STORE_URL": "memory://"})
        .extensions["plants"]
        .store.shared
    )


def test_a_store_url_with_spaces_around_it_is_the_url_as_its_files_is(monkeypatch):
    """PLANTS_STORE_URL_FILE's content is stripped; the variable was not: a trailing space (docker's
    `--env-file` keeps one) was refused as `names a database that is not a number` (the `0 ` of
    `/0 `), a leading one with redis-py's own words, which list neither memory:// nor a cluster."""
    monkeypatch.setenv("PLANTS_STORE_URL", " redis://127.0.0.1:6379/0 \n")
    assert store_location(from_environ())[0] == "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("PLANTS_STORE_URL", " memory:// ")
    assert not create_app({"PLANTS_API_TOKENS": "t"}).extensions["plants"].store.shared


def test_read_tokens_alone_do_not_open_the_service():
    with pytest.raises(ConfigurationError, match=r"^PLANTS_API_TOKENS is not set"):
        create_app({"PLANTS_READ_TOKENS": "reader"})


@pytest.mark.parametrize(
    "value",
    [[], [""], ["", " "], ",", " , "],
    ids=["empty-list", "list-of-empty", "list-of-blanks", "comma", "blank-commas"],
)
def test_tokens_set_to_empty_entries_say_so_not_that_they_are_unset(value):
    """Set, but to entries that are all empty: the message says what is there, not "is not set"."""
    with pytest.raises(ConfigurationError) as raised:
        create_app({"PLANTS_API_TOKENS": value})
    assert str(raised.value).startswith(
        "PLANTS_API_TOKENS is set but holds no token (it has no entry, or only empty ones): list one or more"
        " tokens, comma-separated"
    )


#: Limits `limits.parse_many` takes that mean nothing sensible: a period of 0 (read as 1), a
#: count Redis cannot hold, a period whose expiry Redis refused (the first request a 503).
NONSENSE_LIMITS = [
    ("1/0 second", "whose periods are above 0"),
    ("5 per 0 minutes", "whose periods are above 0"),
    ("10/second;5/00 minute", "whose periods are above 0"),
    (f"{2**63}/second", f"of at most {2**63 - 1} requests a period"),
    ("10/9223372036854775 second", "with a period of at most ten years"),
    ("1/11 years", "with a period of at most ten years"),
]


@pytest.mark.parametrize(("limit", "problem"), NONSENSE_LIMITS)
@pytest.mark.parametrize(
    "key", ["PLANTS_RATE_LIMIT", "PLANTS_AUTH_FAILURE_LIMIT", "PLANTS_AUTH_FAILURE_LIMIT_PER_48"]
)
def test_a_rate_limit_that_makes_no_sense_stops_the_start_naming_the_setting(
    monkeypatch, key, limit, problem
):
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv(key, limit)
    with pytest.raises(ConfigurationError) as raised:
        create_app()
    assert str(raised.value).startswith(f"{key} is not a rate limit {problem}")


@pytest.mark.parametrize("environment", [True, False])
def test_a_48_limit_without_the_per_address_one_stops_the_start(monkeypatch, environment):
    """The /48's limit is counted beside the per-address one only: alone it would guard nothing
    while its operator believed the service guarded."""
    settings = {"PLANTS_API_TOKENS": "t", "PLANTS_AUTH_FAILURE_LIMIT_PER_48": "80/minute"}
    if environment:
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError) as raised:
        create_app(None if environment else settings)
    assert str(raised.value) == (
        "PLANTS_AUTH_FAILURE_LIMIT_PER_48 is set, but PLANTS_AUTH_FAILURE_LIMIT is not: the /48's"
        " limit is counted only beside the per-address one, so set that too"
    )


@pytest.mark.parametrize(("limit", "problem"), NONSENSE_LIMITS)
@pytest.mark.parametrize("key", ["PLANTS_API_TOKENS", "PLANTS_READ_TOKENS"])
def test_a_tokens_own_rate_limit_that_makes_no_sense_stops_the_start(key, limit, problem):
    config = {"PLANTS_API_TOKENS": "writer", "PLANTS_READ_TOKENS": "reader", key: f"secret-token@{limit}"}
    with pytest.raises(ConfigurationError) as raised:
        create_app(config)
    assert str(raised.value).startswith(
        f"{key} has a rate limit for token number 1 that is not a rate limit {problem}"
    )
    assert "secret-token" not in str(raised.value)


@pytest.mark.parametrize("key", ["PLANTS_API_TOKENS", "PLANTS_READ_TOKENS"])
@pytest.mark.parametrize("entry", ["secret-token@", "secret-token@ "])
def test_a_token_with_an_at_sign_and_no_limit_stops_the_start(key, entry):
    """`token@` is a limit left out: taken as the token without one, it passed unseen."""
    config = {"PLANTS_API_TOKENS": "writer", "PLANTS_READ_TOKENS": "reader", key: f"other,{entry}"}
    with pytest.raises(ConfigurationError) as raised:
        create_app(config)
    assert str(raised.value) == (
        f"{key} has a token (number 2) followed by '@' but no rate limit: write one"
        " (token@100/second) or drop the '@'"
    )


@pytest.mark.parametrize(
    "limit", ["1/10 years", "1/3650 days", "5 per 10 minutes|1/year", f"{2**63 - 1}/hour"]
)
def test_the_longest_and_largest_rate_limits_are_taken(limit):
    app = create_app({"PLANTS_API_TOKENS": f"t,u@{limit}", "PLANTS_RATE_LIMIT": limit})
    assert read(app, "t") == 200
    assert read(app, "u") == 200


def test_a_read_token_may_carry_its_own_rate_limit():
    app = create_app({"PLANTS_API_TOKENS": "writer", "PLANTS_READ_TOKENS": "reader@1/minute"})
    assert [read(app, "reader") for _ in range(2)] == [200, 429]
    assert read(app, "writer") == 200


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("PLANTS_STORE_ULR", "PLANTS_STORE_URL"),
        ("PLANTS_RATE_LIMT", "PLANTS_RATE_LIMIT"),
        ("PLANTS_API_TOKEN", "PLANTS_API_TOKENS"),
        ("PLANTS_JWT_ISSUR", "PLANTS_JWT_ISSUER"),
    ],
)
def test_a_misspelled_setting_stops_the_start_naming_the_closest(monkeypatch, name, closest):
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv(name, "x")
    with pytest.raises(ConfigurationError) as raised:
        create_app()
    assert str(raised.value) == f"{name} is not a setting of this service: did you mean {closest}?"
    monkeypatch.delenv(name)
    host = Flask("host")
    host.config.update({"PLANTS_API_TOKENS": "t", name: "x"})
    with pytest.raises(ConfigurationError) as raised:
        host.register_blueprint(bp)
    assert str(raised.value) == (
        f'app.config["{name}"] is not a setting of this service: did you mean app.config["{closest}"]?'
    )


def test_an_unknown_setting_with_no_close_one_points_to_the_readme(monkeypatch):
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv("PLANTS_FROBNICATE", "1")
    with pytest.raises(ConfigurationError, match="PLANTS_FROBNICATE is not a setting of this service: see"):
        create_app()


def gunicorn_start(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gunicorn"],
        cwd=ROOT,
        env={**os.environ, "PLANTS_API_TOKENS": "t", "GUNICORN_BIND": f"127.0.0.1:{free_port()}", **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"GUNICORN_THREADS": "abc"}, "GUNICORN_THREADS must be a whole number >= 1, not 'abc'"),
        ({"GUNICORN_READ_TIMEOUT": "x"}, "GUNICORN_READ_TIMEOUT must be a number of seconds >= 0.1, not 'x'"),
        # NaN and infinity would make every slow client's deadline one that never comes.
        (
            {"GUNICORN_READ_TIMEOUT": "nan"},
            "GUNICORN_READ_TIMEOUT must be a number of seconds >= 0.1, not 'nan'",
        ),
        (
            {"GUNICORN_READ_TIMEOUT": "inf"},
            "GUNICORN_READ_TIMEOUT must be a number of seconds >= 0.1, not 'inf'",
        ),
        # Every thread starts at boot: a worker with a hundred million never booted.
        (
            {"GUNICORN_THREADS": "100000000"},
            "GUNICORN_THREADS must be a whole number <= 10000, not '100000000'",
        ),
        ({"PLANTS_RATE_LIMIT": "0/second"}, "PLANTS_RATE_LIMIT is not a rate limit that allows a request"),
        (
            {"PLANTS_RATE_LIMIT": "1/0 second"},
            "PLANTS_RATE_LIMIT is not a rate limit whose periods are above 0",
        ),
        (
            {"GUNICORN_KEEPALIVE": "1.5"},
            "GUNICORN_KEEPALIVE must be a whole number of seconds >= 0, not '1.5'",
        ),
        ({"GUNICORN_GRACEFUL_TIMEOUT": "-1"}, "GUNICORN_GRACEFUL_TIMEOUT must be a whole number of seconds"),
        (
            {"GUNICORN_THREAD": "2"},
            "GUNICORN_THREAD is not a setting of this service: did you mean GUNICORN_THREADS?",
        ),
        (
            {"PLANTS_STORE_ULR": "redis://x"},
            "PLANTS_STORE_ULR is not a setting of this service: did you mean",
        ),
        (
            {"GUNICORN_BIND": "127.0.0.1:http"},
            "GUNICORN_BIND has no valid port (0-65535) in '127.0.0.1:http'",
        ),
        ({"GUNICORN_BIND": "80000"}, "GUNICORN_BIND has no valid port (0-65535) in '80000'"),
        ({"PLANTS_LOG_FORMAT": "xml"}, "PLANTS_LOG_FORMAT must be text or json"),
        # It said only `true or false`, though the values a flag reads are more (the README's).
        (
            {"PLANTS_METRICS": "maybe"},
            "PLANTS_METRICS must be true or false (or 1/0, yes/no, on/off), not 'maybe'",
        ),
        # The prefix Werkzeug writes into every URL handed out: `/%zz/plants/1` is no URL,
        # `http://127.0.0.1:8000store/...` another host's, `//evil.example` the document's servers'.
        ({"SCRIPT_NAME": "/%zz"}, "SCRIPT_NAME must be a path such as /store"),
        ({"SCRIPT_NAME": "store"}, "SCRIPT_NAME must be a path such as /store"),
        ({"SCRIPT_NAME": "//evil.example"}, "SCRIPT_NAME must be a path such as /store"),
        ({"SCRIPT_NAME": "/store/.."}, "SCRIPT_NAME must be a path such as /store"),
        ({"SCRIPT_NAME": "/a?b"}, "SCRIPT_NAME must be a path such as /store"),
        ({"GUNICORN_BIND": ":9000"}, "GUNICORN_BIND names no host in ':9000'"),
        ({"GUNICORN_BIND": "127.0.0.1:9000,"}, "GUNICORN_BIND must be addresses such as 127.0.0.1:8000"),
    ],
)
def test_every_bad_gunicorn_or_service_setting_is_one_line_without_a_traceback(env, line):
    result = gunicorn_start(env)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"Plant Store: configuration error: {line}" in output
    assert "Traceback" not in output


def test_a_port_alone_in_gunicorn_bind_listens_on_127_0_0_1():
    """`GUNICORN_BIND=18001` is 127.0.0.1:18001, not gunicorn's five attempts to bind a host
    named 18001 on its default port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn"],
        cwd=ROOT,
        env={**os.environ, "PLANTS_API_TOKENS": "t", "GUNICORN_BIND": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_serving(port, process)
    finally:
        process.terminate()
        output = process.communicate(timeout=40)[0]
    assert f"Listening at: http://127.0.0.1:{port}" in output


def test_the_start_logs_what_is_in_effect_without_secrets(redis_server):
    url = redis_server.url.replace("redis://", "redis://:store-secret@")
    server = Gunicorn(
        env={
            "PLANTS_API_TOKENS": "full-secret-1,full-secret-2",
            "PLANTS_READ_TOKENS": "read-secret",
            "PLANTS_RATE_LIMIT": "50/second",
            "PLANTS_STORE_URL": url,
        }
    )
    try:
        log = server.output()
    finally:
        server.stop()
    (line,) = [line for line in log.splitlines() if "Plant Store: store " in line]  # the master's alone
    host = url.split("@")[1]
    assert (
        f"Plant Store: store redis://:***@{host}; 2 full-access and 1 read-only static tokens;"
        " JWT issuer off; rate limits 50/second per token; workers 1, request threads 2 each"
    ) in line
    assert "secret" not in log


@pytest.mark.parametrize("value", ["maybe", 1])
def test_a_flag_of_app_config_refused_says_every_value_it_reads(value):
    """It said `must be true or false`, though it reads `"yes"`, `"1"`... too; the number 1,
    a value of another type, it does not."""
    with pytest.raises(ConfigurationError) as refused:
        load_settings({"PLANTS_API_TOKENS": "t", "PLANTS_DOCS": value})
    assert str(refused.value) == (
        'app.config["PLANTS_DOCS"] must be True or False, or its text (true/false, 1/0, yes/no, on/off),'
        f" not {value!r}"
    )
    assert (
        load_settings({"PLANTS_API_TOKENS": "t", "PLANTS_REQUIRE_IF_MATCH": " On"}).require_if_match is True
    )


@pytest.mark.parametrize(
    ("tokens", "said"),
    [("a@5/second,b", "1 token with its own"), ("a@5/second,b@1/second", "2 tokens with their own")],
)
def test_the_start_line_counts_the_tokens_with_a_limit_of_their_own(tokens, said):
    settings = load_settings({"PLANTS_API_TOKENS": tokens, "PLANTS_RATE_LIMIT": "50/second"})
    line = summary(settings, StoreUrl.parse("memory://"))
    assert f"rate limits 50/second per token, {said}" in line


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://app:s3cret@127.0.0.1:6379/0", "redis://app:***@127.0.0.1:6379/0"),
        # A password written without its colon is the user part: hidden too.
        ("redis://s3cret@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_a_store_url_is_shown_without_its_secret(url, shown):
    assert StoreUrl.parse(url).redacted == shown


def test_a_secret_file_that_is_a_pipe_or_endless_is_refused_at_once(tmp_path):
    """The master reads it again on every reload: a pipe nobody writes must not hold it, nor an
    endless file fill it. A link to a regular file (a mounted Secret's) is read as before."""
    pipe = tmp_path / "tokens-pipe"
    os.mkfifo(pipe)
    endless = tmp_path / "tokens-endless"
    endless.symlink_to("/dev/zero")
    huge = tmp_path / "tokens-huge"
    huge.write_text("writer\n" * 200_000)
    problems: list[str] = []

    def start(path: Path) -> None:
        try:
            create_app({"PLANTS_API_TOKENS_FILE": str(path)})
        except ConfigurationError as exc:
            problems.append(str(exc))

    for path in (pipe, endless, huge):
        attempt = threading.Thread(target=start, args=(path,), daemon=True)
        attempt.start()
        attempt.join(20)
        if attempt.is_alive():  # held in open() or read(): let it go before failing
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
            pytest.fail(f"reading {path.name} did not end")
    assert [problem.split(":")[0] for problem in problems] == [
        "PLANTS_API_TOKENS_FILE names what is not a regular file",
        "PLANTS_API_TOKENS_FILE names what is not a regular file",
        "PLANTS_API_TOKENS_FILE names a file larger than 1024 KiB",
    ]
    real = tmp_path / "tokens-real"
    real.write_text("writer\n")
    linked = tmp_path / "tokens-linked"
    linked.symlink_to(real)
    app = create_app({"PLANTS_API_TOKENS_FILE": str(linked)})
    assert app.test_client().get("/plants", headers={"Authorization": "Bearer writer"}).status_code == 200


def test_a_tls_cluster_url_takes_the_ssl_options_of_a_tls_redis_url_and_no_other():
    url = StoreUrl.parse(
        "rediss+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000?ssl_ca_certs=/ca.pem&ssl_check_hostname=no"
    )
    assert url.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7000))
    assert url.password == "pw"
    assert url.tls_options == (("ssl_ca_certs", "/ca.pem"), ("ssl_check_hostname", False))
    with pytest.raises(ValueError, match="does not take"):
        StoreUrl.parse("rediss+cluster://10.0.0.1:7000?socket_timeout=60")
    with pytest.raises(ValueError, match="takes no password in its query"):
        StoreUrl.parse("rediss+cluster://10.0.0.1:7000?password=s3cret")
    with pytest.raises(ValueError, match="ssl_cert_reqs other than"):
        StoreUrl.parse("rediss+cluster://10.0.0.1:7000?ssl_cert_reqs=NONE")
    with pytest.raises(ValueError, match=r"^takes no path or options: use redis"):
        StoreUrl.parse("redis+cluster://10.0.0.1:7000?ssl_ca_certs=/ca.pem")  # no TLS, no TLS options


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("password=s3cret", "as in rediss+cluster://user:password@host:port,"),
        ("username=u", "as in rediss+cluster://user:password@host:port,"),
        ("db=1", "a cluster has only database 0"),
    ],
)
def test_a_tls_cluster_urls_refusal_gives_advice_a_cluster_url_can_follow(query, said):
    """A cluster URL takes no path: its errors name no `/db` (which the next start would refuse)."""
    with pytest.raises(ValueError, match=re.escape(said)) as raised:
        StoreUrl.parse(f"rediss+cluster://10.0.0.1:7000?{query}")
    assert "/db" not in str(raised.value)
    assert "host:port/0" not in str(raised.value)
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("PLANTS_EVENTS_MAX_WAIT", 4000, 55),
        ("PLANTS_EVENTS_MAX_WAIT", 56, 55),
        ("PLANTS_STORE_TIMEOUT", 3601, 3600),
    ],
)
def test_seconds_past_a_settings_bound_name_the_bound(key, value, bound):
    """A number of seconds above 0 but too large is told its bound, not that it must be above 0."""
    with pytest.raises(ConfigurationError) as raised:
        create_app({"PLANTS_API_TOKENS": "t", key: value})
    assert f"{key} must be at most {bound} seconds, not {value}" in str(raised.value)


@pytest.mark.parametrize("proxies", [1, 2])
def test_forwarded_alone_is_warned_of_once_as_not_read(caplog, proxies):
    """A proxy that sends only RFC 7239's `Forwarded` was not heard at all: every client the proxy's
    address, every link its host, and no line in the log said why. One warning per worker names the
    headers that are read; a proxy that sends `X-Forwarded-*` beside it is read, and not warned of."""
    app = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN, "PLANTS_TRUSTED_PROXIES": proxies})
    client = app.test_client()
    forwarded = {"Forwarded": 'for="[2001:db8::1]:443";proto=https'}
    with caplog.at_level(logging.WARNING, logger="app.telemetry.request_ids"):
        for _ in range(2):
            assert client.get("/openapi.json", headers=forwarded).status_code == 200
    plants_state(app).close()
    warned = [
        record.getMessage() for record in caplog.records if "Forwarded (RFC 7239)" in record.getMessage()
    ]
    assert len(warned) == 1
    assert "X-Forwarded-For" in warned[0]
    assert f"PLANTS_TRUSTED_PROXIES is {proxies}" in warned[0]

    caplog.clear()
    both = create_app({"TESTING": True, "PLANTS_API_TOKENS": TOKEN, "PLANTS_TRUSTED_PROXIES": proxies})
    with caplog.at_level(logging.WARNING, logger="app.telemetry.request_ids"):
        for headers in ({**forwarded, "X-Forwarded-For": "2001:db8::1"}, forwarded):
            assert both.test_client().get("/openapi.json", headers=headers).status_code == 200
    plants_state(both).close()
    assert not [record for record in caplog.records if "Forwarded (RFC 7239)" in record.getMessage()]
