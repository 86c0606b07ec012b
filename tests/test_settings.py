"""Settings: tokens from config, environment and file; failing closed; validation."""

from __future__ import annotations

import pytest

from app import ConfigurationError, create_app
from app.settings import api_tokens, from_environ

SETTINGS = (
    "PLANTS_API_TOKENS",
    "PLANTS_API_TOKENS_FILE",
    "MAX_CONTENT_LENGTH",
    "PLANTS_MAX_PLANTS",
    "PLANTS_TRUSTED_PROXIES",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for key in SETTINGS:
        monkeypatch.delenv(key, raising=False)


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
    [("PLANTS_MAX_PLANTS", "many"), ("MAX_CONTENT_LENGTH", "1.5"), ("PLANTS_TRUSTED_PROXIES", "yes")],
)
def test_non_integer_setting_in_environment_is_refused(monkeypatch, key, value):
    monkeypatch.setenv("PLANTS_API_TOKENS", "t")
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match=key):
        create_app()


@pytest.mark.parametrize(
    ("key", "value"), [("PLANTS_MAX_PLANTS", -1), ("MAX_CONTENT_LENGTH", 0), ("PLANTS_TRUSTED_PROXIES", True)]
)
def test_out_of_range_setting_is_refused(key, value):
    with pytest.raises(ConfigurationError, match=key):
        create_app({"PLANTS_API_TOKENS": "t", key: value})


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
