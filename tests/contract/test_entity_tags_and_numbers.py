"""Properties of two parsers that every request meets: conditional headers (RFC 9110 §8.8.3 and
§13.1.1), on memory and in the Redis scripts alike, and JSON numbers of any exponent in a path,
a query and a body (always an answer, never a 500)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.store import plant_etag
from tests.conftest import STORES
from tests.helpers import error_of

# Reproducible in CI; no deadline, since these machines are shared and noisy.
PROPERTY = settings(
    derandomize=True,
    deadline=None,
    max_examples=120,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
FERN = plant_etag("Fern", None)

opaque = st.sampled_from([FERN, "*", "", "other", FERN.upper(), "W/"]) | st.text(
    st.characters(min_codepoint=0x23, max_codepoint=0x7E), max_size=6
)
entity_tag = st.builds(lambda weak, value: f'{"W/" if weak else ""}"{value}"', st.booleans(), opaque)
spaces = st.sampled_from(["", " ", "\t", "  "])
# Members that are not entity-tags: read leniently, each names no plant.
not_a_tag = st.sampled_from(["0", "abc", FERN, f'"{FERN}', f'{FERN}"', "*", "**", "W/", 'W/"', '"a" "b"', ""])
header = st.one_of(
    st.builds(lambda a, b: f"{a}*{b}", spaces, spaces),
    st.builds(
        lambda tags, pad, sep: pad + f"{pad},{sep}".join(tags) + pad,
        st.lists(entity_tag | not_a_tag, min_size=1, max_size=4),
        spaces, spaces,
    ),
)  # fmt: skip


def reference(value: str, etag: str, *, strong: bool) -> bool:
    """Whether a header matches a plant whose ETag is `etag`, read plainly: RFC 9110's list, with
    a member that is not an entity-tag naming nothing."""
    members = [member.strip(" \t") for member in value.split(",") if member.strip(" \t")]
    if members == ["*"]:
        return True
    return f'"{etag}"' in members or (not strong and f'W/"{etag}"' in members)


@pytest.fixture(params=STORES)
def store_settings(request):
    from tests.conftest import settings_for_store

    return settings_for_store(request, request.param)


@PROPERTY
@given(value=header)
def test_if_match_is_read_as_rfc_9110_says_on_every_store(client, auth, value):
    assert client.put("/plants/1", json={"name": "Fern"}, headers=auth).status_code in (200, 201)
    matches = reference(value, FERN, strong=True)
    response = client.put("/plants/1", json={"name": "Fern"}, headers={**auth, "If-Match": value})
    assert response.status_code == (200 if matches else 412), value


@PROPERTY
@given(value=header)
def test_if_none_match_is_read_as_rfc_9110_says_on_every_store(client, auth, value):
    assert client.put("/plants/1", json={"name": "Fern"}, headers=auth).status_code in (200, 201)
    matches = reference(value, FERN, strong=False)
    response = client.delete("/plants/1", headers={**auth, "If-None-Match": value})
    assert response.status_code == (412 if matches else 204), value
    read = client.get("/plants/1", headers={**auth, "If-None-Match": value})
    assert read.status_code == (404 if not matches else 304), value


# Every spelling of a JSON number: any sign, digits, fraction and exponent, exponents far past
# what decimal.Decimal's context takes.
digits = st.from_regex(r"\A(0|[1-9][0-9]{0,25})\Z")
number = st.builds(
    lambda sign, whole, fraction, exponent: f"{sign}{whole}{fraction}{exponent}",
    st.sampled_from(["", "-"]),
    digits,
    st.sampled_from(["", ".0", ".5", ".000"]) | st.from_regex(r"\A\.[0-9]{1,30}\Z"),
    st.sampled_from(["", "e0", "E+2", "e-2"])
    | st.builds(lambda e, s, n: f"{e}{s}{n}", st.sampled_from("eE"), st.sampled_from(["", "+", "-"]),
                st.from_regex(r"\A[0-9]{1,40}\Z")),
)  # fmt: skip


def _answered(response, allowed):
    assert response.status_code in allowed, (response.status_code, response.get_data(as_text=True))
    if response.status_code == 400:
        assert response.is_json
        assert response.json["error"] == 400


@PROPERTY
@given(literal=number)
def test_any_number_in_a_path_query_or_body_is_answered_never_a_500(client, auth, literal):
    _answered(client.get(f"/plants/{literal}", headers=auth), {200, 400, 404})
    _answered(client.get(f"/plants?limit={literal}", headers=auth), {200, 400})
    _answered(client.get(f"/events?limit={literal}", headers=auth), {200, 400})
    for field in ("id", "name", "tag"):
        body = {"id": 7, "name": "Fern", field: "NUMBER"}
        data = json.dumps(body).replace('"NUMBER"', literal)
        post = client.post("/plants", data=data, headers={**auth, "Content-Type": "application/json"})
        _answered(post, {200, 409, 400})
        if post.status_code == 400:
            assert field in error_of(post, 400)["details"]
    put = client.put("/plants/7", data=f'{{"name": "Fern", "extra": [{literal}]}}',
                     headers={**auth, "Content-Type": "application/json"})  # fmt: skip
    _answered(put, {400})
