"""Where a page or the feed starts again: the stores' positions (app/store/base.py for plants,
app/store/redis/feed.py for a Redis feed's groups) and the signed cursors that carry them to the
client and back (app/http/cursor.py)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.http.cursor import EVENTS, PAGES, InvalidCursor, decode_cursor, encode_cursor, scope
from app.schemas.records import INT64_MAX, INT64_MIN
from app.store.base import id_position, position_id
from app.store.redis.feed import decode_position, encode_position

KEY = b"k" * 32
#: Reproducible, and no deadline: the machines that run the tests are shared.
steady = settings(derandomize=True, deadline=None)
ids = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
tags = st.none() | st.lists(st.text(min_size=1, max_size=5), max_size=4)


@given(ids)
@steady
def test_an_id_position_names_its_id_in_8_bytes(plant_id):
    position = id_position(plant_id)
    assert len(position) == 8
    assert position_id(position) == plant_id


@pytest.mark.parametrize("plant_id", [INT64_MIN, -1, 0, 1, INT64_MAX])
def test_id_positions_at_the_edges(plant_id):
    assert position_id(id_position(plant_id)) == plant_id


@pytest.mark.parametrize("position", [b"", b"\x00" * 7, b"\x00" * 9, b"\x00" * 16])
def test_a_position_of_another_length_is_refused(position):
    with pytest.raises(ValueError, match="not a position of this store"):
        position_id(position)


group_positions = st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
    min_size=1,
    max_size=24,
)


@given(group_positions)
@steady
def test_a_feed_position_round_trips_for_any_number_of_groups(positions):
    assert decode_position(encode_position(positions), len(positions)) == positions


def test_a_feed_position_is_varints_seven_bits_a_byte():
    # 0 and 127 take one byte each; 128 takes two (low 7 bits first, with the high bit set).
    assert encode_position([(0, 127, 128)]) == b"\x00\x7f\x80\x01"
    assert encode_position([(0, 0, 0)] * 24) == b"\x00" * 72


@pytest.mark.parametrize(
    ("data", "groups"),
    [
        (b"\x00\x00", 1),  # too few values for one group
        (b"\x00" * 6, 1),  # values of two groups where one is expected
        (b"\x00\x00\x80", 1),  # the last varint never ends
        (b"\x00\x00" + b"\xff" * 10 + b"\x01", 1),  # a varint past 64 bits
        (b"", 1),
    ],
)
def test_a_malformed_feed_position_is_refused(data, groups):
    with pytest.raises(ValueError, match="not a position of this store"):
        decode_position(data, groups)


@given(st.binary(min_size=1, max_size=16), tags)
@steady
def test_a_cursor_gives_back_its_position(position, filter_tags):
    cursor = encode_cursor(KEY, position, filter_tags)
    assert decode_cursor(KEY, cursor, filter_tags) == position
    assert not set(cursor) & set("=+/")  # fits a query string unescaped


def test_a_feed_cursor_carries_a_long_position_and_is_no_page_cursor():
    position = bytes(range(256)) * 4
    cursor = encode_cursor(KEY, position, None, EVENTS)
    assert decode_cursor(KEY, cursor, None, EVENTS) == position
    with pytest.raises(InvalidCursor, match="Not a cursor: pass back"):
        decode_cursor(KEY, cursor, None, PAGES)
    too_long = encode_cursor(KEY, position + b"x", None, EVENTS)  # a feed's is at most 1,024 bytes
    with pytest.raises(InvalidCursor, match="Not a cursor: pass back"):
        decode_cursor(KEY, too_long, None, EVENTS)


def test_a_cursor_is_good_only_for_its_key_and_its_tags():
    cursor = encode_cursor(KEY, id_position(7), ["fern", "palm"])
    # The same set of tags in any order, repeated or not, is the same filter.
    assert decode_cursor(KEY, cursor, ["palm", "fern", "palm"]) == id_position(7)
    for key, other_tags in [(b"x" * 32, ["fern", "palm"]), (KEY, ["fern"]), (KEY, None), (KEY, [])]:
        with pytest.raises(InvalidCursor, match="Not a cursor this service made for these tags"):
            decode_cursor(key, cursor, other_tags)


def test_a_feed_cursor_signed_with_another_key_says_start_again():
    cursor = encode_cursor(KEY, b"\x01\x02", None, EVENTS)
    with pytest.raises(InvalidCursor, match=r"start\s+again from `after=now`"):
        decode_cursor(b"x" * 32, cursor, None, EVENTS)


def test_no_two_tag_filters_sign_alike():
    # A separator inside a tag cannot make two lists of tags one: each tag is length-prefixed.
    filters = [None, [], ["a,b"], ["a", "b"], ["ab"], ["a", "b", "c"], ["a\x1f", "b"], ["a", "\x1fb"]]
    assert len({scope(f) for f in filters}) == len(filters)


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "!!!!",  # not the alphabet
        "AQ",  # a kind and nothing else
        "AQ==",  # padding, which this service never writes
        " " + encode_cursor(KEY, id_position(1), None),
        encode_cursor(KEY, b"\x00" * 17, None),  # a page's position is at most 16 bytes
        encode_cursor(KEY, b"", None),  # and at least one
    ],
)
def test_a_malformed_cursor_is_refused_as_malformed(cursor):
    with pytest.raises(InvalidCursor, match="Not a cursor: pass back the `next` of a page unchanged"):
        decode_cursor(KEY, cursor, None)


def test_only_the_spelling_this_service_writes_is_a_cursor():
    """A last base64 character can carry unused bits: a cursor with them set decodes to the same
    bytes, but is refused, so no two strings name one position."""
    cursor = encode_cursor(KEY, b"\x07", None)
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    assert len(raw) % 3  # the last character has spare bits
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    respelled = cursor[:-1] + alphabet[alphabet.index(cursor[-1]) + 1]
    assert base64.urlsafe_b64decode(respelled + "=" * (-len(respelled) % 4)) == raw
    with pytest.raises(InvalidCursor, match="Not a cursor: pass back"):
        decode_cursor(KEY, respelled, None)
