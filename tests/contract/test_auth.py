"""The bearer hook: every row of the authentication table."""

from __future__ import annotations

import pytest

from tests.helpers import error_of, refused_alike_and_documented

PLANT = {"id": 1, "name": "Fern"}
CHALLENGE = 'Bearer realm="plants"'


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": ""},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Token test-token-1"},
        {"Authorization": "Bearertest-token-1"},
    ],
    ids=["absent", "empty", "basic", "other-scheme", "no-separator"],
)
def test_missing_or_other_scheme_is_401_with_plain_challenge(client, store, headers):
    response = client.post("/plants", json=PLANT, headers=headers)
    error_of(response, 401)
    assert response.headers["WWW-Authenticate"] == CHALLENGE
    assert len(store) == 0


@pytest.mark.parametrize("name", ["access_token", "token", "bearer"])
def test_a_token_in_the_query_or_a_form_is_not_a_credential(client, store, name):
    """RFC 6750 §2.2 and §2.3 (a form body, the query) are not accepted: a token in a URL ends up
    in logs, caches and Referer headers. Only the Authorization header lets a caller in."""
    response = client.post(f"/plants?{name}=test-token-1", json=PLANT)
    error_of(response, 401)
    assert response.headers["WWW-Authenticate"] == CHALLENGE
    form = client.post("/plants", data={name: "test-token-1"})
    error_of(form, 401)
    assert len(store) == 0


@pytest.mark.parametrize("value", ["Bearer\ttest-token-1", "Bearer\t test-token-1", "Bearertest-token-1"])
def test_a_bearer_scheme_not_followed_by_a_space_is_told_so(client, store, value):
    """RFC 9110 §11.4: the scheme and the token are separated by spaces (a tab is not one): the
    refusal says so rather than that the header uses another scheme, and never repeats the token."""
    response = client.post("/plants", json=PLANT, headers={"Authorization": value})
    assert error_of(response, 401)["message"] == (
        "The Authorization header must be 'Bearer', a space, then the token: another separator"
        " (a tab) or none is not accepted."
    )
    assert b"test-token-1" not in response.get_data()
    assert len(store) == 0


@pytest.mark.parametrize("token", ["wrong-token", "test-token-2", "TEST-TOKEN-1", "test-token-1="])
def test_token_not_accepted_is_401_invalid_token(client, store, token):
    response = client.post("/plants", json=PLANT, headers={"Authorization": f"Bearer {token}"})
    error_of(response, 401)
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="invalid_token"'
    assert token.encode() not in response.get_data()
    assert len(store) == 0


@pytest.mark.parametrize(
    "value",
    [
        "Bearer",
        "Bearer ",
        "Bearer    ",
        "Bearer two tokens",
        "Bearer tok,en",
        "Bearer to\x01ken",
        "Bearer tökén",
        "Bearer =abc",
        "Bearer a=b",
    ],
    ids=[
        "bare",
        "empty",
        "spaces",
        "two-words",
        "comma",
        "control-char",
        "non-ascii",
        "leading-equals",
        "inner-equals",
    ],
)
def test_empty_or_malformed_token_is_400_invalid_request(client, store, value):
    response = client.post("/plants", json=PLANT, headers={"Authorization": value})
    error_of(response, 400)
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plants", error="invalid_request"'
    assert len(store) == 0


def test_every_operation_behind_the_token_documents_the_malformed_token_400(client):
    """The bearer guard refuses a malformed token before any operation that needs one: each such
    operation of the served document lists that 400 and its challenge, webhooks and metrics too."""
    challenges = refused_alike_and_documented(
        client, {"Authorization": "Bearer two tokens"}, 400, "WWW-Authenticate"
    )
    assert challenges == {'Bearer realm="plants", error="invalid_request"'}


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_scheme_is_case_insensitive(client, scheme):
    response = client.post("/plants", json=PLANT, headers={"Authorization": f"{scheme} test-token-1"})
    assert response.status_code == 200
    assert response.json == {"name": "Fern"}


def test_every_configured_token_is_accepted_for_rotation(client, store):
    for number, token in enumerate(["test-token-1", "second-token"]):
        response = client.post(
            "/plants", json={"id": number, "name": "Fern"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200
    assert len(store) == 2


def test_spaces_between_scheme_and_token_are_allowed(client):
    response = client.post("/plants", json=PLANT, headers={"Authorization": "Bearer   test-token-1"})
    assert response.status_code == 200


def test_authentication_runs_before_the_body_is_read(client, app):
    # A body that would be 413 and 415 and malformed: the unauthenticated caller learns only 401.
    big = b"{" * (app.config["MAX_CONTENT_LENGTH"] + 1)
    response = client.post("/plants", data=big, content_type="text/plain")
    error_of(response, 401)


def test_no_www_authenticate_once_authenticated_errors(client, auth):
    response = client.post("/plants", data="{", content_type="application/json", headers=auth)
    error_of(response, 400)
    assert "WWW-Authenticate" not in response.headers
