"""A plant value in Redis that this service did not write (another program's, a truncated copy, a
bad restore): every operation on it answers the JSON 503 naming the repair, logs the key, and
writes nothing; nothing written by the service's own scripts ever carries it into the feed."""

from __future__ import annotations

import logging
import random
from importlib import resources

import pytest
import redis

from app.store import StoreUnavailableError
from app.store.redis.groups import Groups, decode_fields, member
from tests.conftest import redis_settings
from tests.helpers import error_of

#: Values no plant is stored as (`<name length>:<name><tag>`, UTF-8): no length, a length that is
#: not a number, a name cut inside a character, a tag that is not UTF-8, a surrogate (which
#: Python's UTF-8 refuses) and an overlong encoding of '/'.
UNREADABLE = [b"garbage", b"x:p5", b"4:caf\xc3x", b"2:okfern\xff", b"3:a\xed\xa0\x80", b"2:\xc0\xaf"]


@pytest.fixture
def store_settings(redis_server):
    return redis_settings(redis_server)


@pytest.fixture
def stored(make_app, store_settings, redis_server):
    """The service, and a raw client on its Redis with plant 7 (tag `fern`) then overwritten by
    another program."""
    app = make_app()
    client = app.test_client()
    raw = redis.Redis(unix_socket_path=str(redis_server.socket))
    yield app, client, raw, Groups(store_settings["PLANTS_STORE_PREFIX"], count=1, capacity=10, cluster=False)
    raw.close()


def _events(client, auth) -> list[dict]:
    response = client.get("/events?limit=1000", headers=auth)
    assert response.status_code == 200, response.get_data()
    return response.get_json()["events"]


@pytest.mark.parametrize("value", UNREADABLE)
def test_an_unreadable_plant_is_a_503_to_every_operation_and_nothing_is_written(stored, auth, value, caplog):
    _, client, raw, groups = stored
    for plant in ({"id": 7, "name": "Boston fern", "tag": "fern"}, {"id": 8, "name": "Palm", "tag": "palm"}):
        assert client.post("/plants", json=plant, headers=auth).status_code == 200
    bucket = groups.bucket_key(7)
    raw.hset(bucket, "7", value)
    keys = [key for key in raw.keys(f"{groups.tags[0]}*") if not key.endswith(b":events")]
    keys_before = {key: raw.dump(key) for key in keys}
    events_before = _events(client, auth)
    caplog.set_level(logging.ERROR)
    writes = [
        ("PATCH", {"tag": "indoor"}, {"Content-Type": "application/merge-patch+json"}),
        ("PATCH", {"name": "Kept tag"}, {"Content-Type": "application/merge-patch+json"}),
        ("PUT", {"name": "New", "tag": "indoor"}, {}),
        ("DELETE", None, {}),
    ]
    for method, body, headers in writes:
        response = client.open("/plants/7", method=method, json=body, headers={**auth, **headers})
        record = error_of(response, 503)
        assert "cannot read" in record["message"], record
        assert response.headers["Retry-After"]
    for path in ("/plants/7", "/plants", "/plants?tags=fern"):
        error_of(client.get(path, headers=auth), 503)
    # Nothing written: the value, the count, the indexes and the feed are as they were.
    assert raw.hget(bucket, "7") == value
    assert {key: raw.dump(key) for key in keys_before} == keys_before
    assert _events(client, auth) == events_before
    # The log names the plant and its key, for the operator to repair it.
    assert any(bucket in line and "7" in line for line in caplog.messages), caplog.messages
    # The others serve as before.
    assert client.get("/plants/8", headers=auth).get_json() == {"name": "Palm", "tag": "palm"}
    assert client.delete("/plants/8", headers=auth).status_code == 204
    # Once repaired (written as the service writes it), it serves again.
    raw.hset(bucket, "7", b"6:Repairfern")
    assert client.get("/plants/7", headers=auth).get_json() == {"name": "Repair", "tag": "fern"}
    assert member(7) in raw.zrange(f"{groups.tags[0]}:l::a", 0, -1)


def test_an_event_this_service_cannot_read_is_a_503_not_a_refused_cursor(stored, auth):
    _, client, raw, groups = stored
    assert client.post("/plants", json={"id": 1, "name": "a"}, headers=auth).status_code == 200
    raw.xadd(groups.feed_key(0), {"e": b"1 1 1:b\xff", "o": b""})
    error_of(client.get("/events?limit=10", headers=auth), 503)


def test_the_scripts_refuse_exactly_the_values_the_service_cannot_read(redis_server):
    """`readable` (scripts/library.lua) and `decode_fields` judge alike: every two-byte name, and
    random values made mostly of UTF-8's boundary bytes; a value one refuses and the other reads
    would be written by a script, then unreadable, or refused though readable."""
    library = resources.files("app.store.redis").joinpath("scripts", "library.lua").read_text("utf-8")
    raw = redis.Redis(unix_socket_path=str(redis_server.socket))
    script = raw.register_script(library + "\nreturn readable(ARGV[3]) and 1 or 0\n")
    groups = Groups("judged", count=1, capacity=1, cluster=False)
    rng = random.Random(36)
    edges = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF]
    edges += [0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
    values = [b"2:" + bytes([a, b]) for a in range(256) for b in range(256)]
    for _ in range(5000):
        size = rng.randrange(7)
        body = bytes(rng.choice(edges) if rng.random() < 0.8 else rng.randrange(256) for _ in range(size))
        values.append(b"%d:%s" % (rng.randrange(7), body) if rng.random() < 0.95 else body)
    pipe = raw.pipeline(transaction=False)
    for value in values:
        script(keys=[], args=["{judged}", "", value], client=pipe)
    judged = pipe.execute()
    raw.close()

    def reads(value: bytes) -> int:
        try:
            decode_fields(value, 1, groups)
        except StoreUnavailableError:
            return 0
        return 1

    differ = [value for value, lua_says in zip(values, judged, strict=True) if reads(value) != lua_says]
    assert not differ, differ[:10]
    assert 0.05 < sum(judged) / len(judged) < 0.95  # both kinds judged


@pytest.mark.parametrize("value", [b"garbage", b"4:caf\xc3xfern"])
def test_the_migration_names_an_unreadable_plant_and_indexes_it_once_repaired(
    redis_server, value, monkeypatch, capsys
):
    """`python -m app.store.migrate` over a 1.0.0 store holding a value this service did not write:
    it indexed a name cut inside a character under a tag made of its bytes, and stopped at one with
    no length saying Redis had failed, run it again; it now stops naming the plant and its key,
    indexes nothing of it, and indexes it once repaired."""
    from app.store import migrate

    settings = redis_settings(redis_server)
    for name, setting in settings.items():
        monkeypatch.setenv(name, setting)
    groups = Groups(settings["PLANTS_STORE_PREFIX"], count=1, capacity=10, cluster=False)
    raw = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    try:
        raw.hset(groups.bucket_key(6), "6", b"4:Palm")
        raw.hset(groups.bucket_key(7), "7", value)
        raw.set(f"{groups.tags[0]}:count", 2)
        assert migrate.main([]) == 1
        error = capsys.readouterr().err
        assert (
            f"plant 7 (field 7 of {groups.bucket_key(7)}) is not stored as this service writes plants"
            in error
        )
        indexes = [key for key in raw.keys(f"{groups.tags[0]}:*") if raw.type(key) == b"zset"]
        assert all(member(7) not in raw.zrange(key, 0, -1) for key in indexes)
        raw.hset(groups.bucket_key(7), "7", b"4:Fernfern")
        assert migrate.main([]) == 0
        assert member(7) in raw.zrange(f"{groups.tags[0]}:l::a", 0, -1)
        assert member(7) in raw.zrange(f"{groups.tags[0]}:l::tfern", 0, -1)
    finally:
        raw.close()
