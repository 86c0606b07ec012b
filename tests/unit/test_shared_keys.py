"""The provider's keys shared between gunicorn's workers (app/auth/shared_keys.py): a record is read
back only from its own source, and whole."""

from __future__ import annotations

import mmap

import pytest

from app.auth import shared_keys

SOURCE = "https://id.example\0https://id.example/.well-known/openid-configuration\0"
DOCUMENT = b'{"keys": [{"kty": "EC", "kid": "a"}]}'


@pytest.fixture
def mapping(monkeypatch):
    """A mapping of this test's own: the module's stays as it was for every other test."""
    shared = mmap.mmap(-1, shared_keys.SIZE)
    monkeypatch.setattr(shared_keys, "_shared", shared)
    return shared


def test_without_a_mapping_nothing_is_kept(monkeypatch):
    monkeypatch.setattr(shared_keys, "_shared", None)
    shared_keys.remember(SOURCE, DOCUMENT)
    assert shared_keys.recall(SOURCE) is None


def test_a_record_is_read_back_from_its_own_source_only(mapping):
    assert shared_keys.recall(SOURCE) is None  # nothing written yet
    shared_keys.remember(SOURCE, DOCUMENT)
    assert shared_keys.recall(SOURCE) == DOCUMENT
    assert shared_keys.recall(SOURCE.replace("id.example", "other.example")) is None


def test_a_torn_record_is_not_read(mapping):
    shared_keys.remember(SOURCE, DOCUMENT)
    end = mapping.find(DOCUMENT) + len(DOCUMENT)
    mapping[end - 3 : end] = b"XXX"  # another worker's write, half done
    assert shared_keys.recall(SOURCE) is None


def test_a_document_too_large_to_share_withdraws_the_one_before(mapping):
    """The keys loaded before are not the worker's any more (the provider may have withdrawn one
    of them): a worker started later must not verify with them, so nothing is shared."""
    shared_keys.remember(SOURCE, DOCUMENT)
    shared_keys.remember(SOURCE, b" " * shared_keys.SIZE)
    assert shared_keys.recall(SOURCE) is None


def test_the_same_record_is_not_written_again(mapping, monkeypatch, tmp_path):
    """Every refresh of every worker remembers its keys: the same ones, already whole, are left as
    they are (a write makes the record unreadable while it lasts, to a worker that starts then)."""
    shared_keys.remember(SOURCE, DOCUMENT)
    file = tmp_path / "record"
    file.write_bytes(mapping[:])
    with file.open("rb") as opened, mmap.mmap(opened.fileno(), 0, access=mmap.ACCESS_READ) as read_only:
        monkeypatch.setattr(shared_keys, "_shared", read_only)  # a write would raise
        shared_keys.remember(SOURCE, DOCUMENT)
        assert shared_keys.recall(SOURCE) == DOCUMENT
        with pytest.raises(TypeError):  # another document is written
            shared_keys.remember(SOURCE, DOCUMENT.replace(b'"a"', b'"b"'))
