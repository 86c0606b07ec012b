"""A plant's entity-tag (app/store/base.py) and the conditional headers that name entity-tags
(app/http/conditional.py), as pure functions."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.http.conditional import parse_entity_tags
from app.store.base import ANY_PLANT, Precondition, encode, plant_etag

names = st.text(min_size=1, max_size=20)
tags = st.none() | st.text(min_size=1, max_size=20)


def test_the_etag_is_16_hex_digits_of_the_sha1_of_the_plants_one_encoding():
    assert encode("Fern", "fern") == b"4:Fernfern"
    assert encode("Fern", None) == b"4:Fern"
    assert encode("Café", None) == b"5:Caf\xc3\xa9"  # the length in UTF-8 bytes
    assert plant_etag("Fern", "fern") == hashlib.sha1(b"4:Fernfern", usedforsecurity=False).hexdigest()[:16]
    assert plant_etag("Fern", "fern") == "108ae3c5472d69af"


@given(names, tags, names, tags)
@settings(derandomize=True, deadline=None)
def test_two_plants_share_an_encoding_only_if_they_are_the_same_plant(name, tag, other_name, other_tag):
    """The name's length first: ("ab", "c") and ("a", "bc") are different plants."""
    same = (name, tag) == (other_name, other_tag)
    assert (encode(name, tag) == encode(other_name, other_tag)) == same


def test_a_name_and_tag_split_elsewhere_is_another_etag():
    assert plant_etag("ab", "c") != plant_etag("a", "bc")
    assert plant_etag("a:b", None) != plant_etag("a", ":b")


@pytest.mark.parametrize(
    ("header", "strong", "tags"),
    [
        ('"a"', True, {"a"}),
        ('"a", "b"', True, {"a", "b"}),
        ('W/"a", "b"', True, {"b"}),  # If-Match compares strongly: a weak tag matches nothing
        ('W/"a", "b"', False, {"a", "b"}),  # If-None-Match compares weakly
        ("*", True, {ANY_PLANT}),
        (" * ", False, {ANY_PLANT}),
        ('"*"', True, {"*"}),  # a quoted star is an ordinary tag, not the wildcard
        ('*, "a"', True, {"a"}),  # a star inside a list names nothing
        ('"a",,\t"b" ,', True, {"a", "b"}),  # empty members and whitespace
        ('""', True, {""}),
        ("abc, 0", True, set()),  # not entity-tags: they match nothing, the header is not refused
        ('"unterminated', True, set()),
        ('"a"b', True, set()),
        ('"with space"', True, set()),  # the opaque value is visible ASCII only
        ('"café"', True, set()),
        ("", True, set()),
    ],
)
def test_a_conditional_header_names_its_entity_tags(header, strong, tags):
    assert parse_entity_tags(header, strong=strong) == tags


def test_a_precondition_allows_a_write_to_a_stored_plant_by_its_etag():
    etag = plant_etag("Fern", None)
    other = plant_etag("Palm", None)
    assert Precondition().allows(etag)
    assert Precondition(if_match=frozenset({ANY_PLANT})).allows(etag)
    assert Precondition(if_match=frozenset({other, etag})).allows(etag)
    assert not Precondition(if_match=frozenset({other})).allows(etag)
    assert not Precondition(if_match=frozenset()).allows(etag)  # a header that named no tag
    assert Precondition(if_none_match=frozenset({other})).allows(etag)
    assert not Precondition(if_none_match=frozenset({etag})).allows(etag)
    assert not Precondition(if_none_match=frozenset({ANY_PLANT})).allows(etag)
    assert not Precondition(if_match=frozenset({etag}), if_none_match=frozenset({etag})).allows(etag)
