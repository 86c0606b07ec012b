"""GET /plants: pages in ascending id order, cursors, the tags filter and every refusal, on every store.

On a Redis Cluster pages come group by group (ascending id within each bucket group) and may
stop short of `limit` at a group's end: `in_order` and `id_order` say what each store promises.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest
import redis as redis_py

from app import create_app
from app.store.redis.groups import CLUSTER_GROUPS, Groups
from app.store.redis.hints import TAG_HINTS, tag_hint
from tests.conftest import STORES_AND_CLUSTER, cluster_settings, redis_settings, settings_for_store
from tests.helpers import error_of
from tests.servers import TOKEN, RedisClusterServers, RedisServer

LINK = re.compile(r'^<(?P<url>[^>]+)>; rel="next"$')


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    """This module's tests run on the cluster too."""
    return settings_for_store(request, request.param)


@pytest.fixture
def id_order(store_settings) -> bool:
    """Whether the store pages in plain ascending id order (all but a cluster)."""
    return "cluster" not in store_settings.get("PLANTS_STORE_URL", "")


@pytest.fixture
def in_order(id_order):
    """Some ids in the store's page order: ascending, or on a cluster group by group."""
    if id_order:
        return sorted
    groups = Groups("any", count=CLUSTER_GROUPS, capacity=1, cluster=False)
    return lambda ids: sorted(ids, key=lambda plant_id: (groups.of(plant_id), plant_id))


@pytest.fixture
def plant(client, auth):
    def create(plant_id, name=None, tag=None):
        body = {"id": plant_id, "name": name or f"plant {plant_id}"}
        if tag is not None:
            body["tag"] = tag
        response = client.post("/plants", json=body, headers=auth)
        assert response.status_code == 200

    return create


def until_not_503(send):
    """`send()`'s response, sent again after a 503 (as a client does): on a loaded machine one of
    thousands of writes may reach Redis after its deadline (`LATE`), which refuses it, never applies it."""
    for _ in range(10):
        response = send()
        if response.status_code != 503:
            return response
        assert response.json["error"] == 503, response.json
        time.sleep(0.1)
    return response


def walk(client, auth, query: str = "") -> tuple[list[dict], int]:
    """Every page from the first, following `Link`; the plants and the number of pages."""
    plants, pages = [], 0
    url = f"/plants?{query}" if query else "/plants"
    while True:
        response = client.get(url, headers=auth)
        assert response.status_code == 200, response.json
        page = response.json
        pages += 1
        plants += page["plants"]
        link = response.headers.get("Link")
        assert ("next" in page) == (link is not None)
        if link is None:
            return plants, pages
        next_url = urlsplit(LINK.fullmatch(link)["url"])
        assert parse_qs(next_url.query)["after"] == [page["next"]]
        url = f"{next_url.path}?{next_url.query}"


def test_an_empty_store_is_one_empty_page(client, auth):
    response = client.get("/plants", headers=auth)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json == {"plants": []}
    assert "Link" not in response.headers


def test_plants_come_in_ascending_id_order_with_negative_ids_first(client, auth, plant, in_order):
    ids = (5, -(2**63), 0, 2**63 - 1, -1, 65536, 3)
    for plant_id in ids:
        plant(plant_id, tag="fern" if plant_id % 2 else None)
    plants, _ = walk(client, auth)
    assert [item["id"] for item in plants] == in_order(ids)
    by_id = {item["id"]: item for item in plants}
    assert by_id[3] == {"id": 3, "name": "plant 3", "tag": "fern"}
    assert by_id[0] == {"id": 0, "name": "plant 0"}  # no tag: omitted, never null


def test_the_default_page_is_100_and_next_leads_on(client, auth, plant, in_order, id_order):
    for plant_id in range(150):
        plant(plant_id)
    first = client.get("/plants", headers=auth)
    ids = [item["id"] for item in first.json["plants"]]
    assert ids == in_order(range(150))[: len(ids)]
    assert len(ids) == 100 if id_order else 0 < len(ids) <= 100
    link = LINK.fullmatch(first.headers["Link"])["url"]
    assert link.startswith("http://localhost/plants?after=")
    rest, _ = walk(client, auth, f"after={first.json['next']}")
    assert [item["id"] for item in rest] == in_order(range(150))[len(ids) :]
    if id_order:
        second = client.get("/plants", query_string={"after": first.json["next"]}, headers=auth)
        assert "next" not in second.json
        assert "Link" not in second.headers


def test_next_is_absent_when_the_last_page_is_exactly_full(client, auth, plant):
    for plant_id in range(6):
        plant(plant_id)
    first = client.get("/plants?limit=3", headers=auth).json
    assert "next" in first
    last = client.get("/plants", query_string={"limit": 3, "after": first["next"]}, headers=auth)
    assert [item["id"] for item in last.json["plants"]] == [3, 4, 5]
    assert "next" not in last.json


@pytest.mark.parametrize("limit", [1, 2, 7, 1000])
def test_a_walk_returns_every_plant_exactly_once(client, auth, plant, limit, in_order, id_order):
    ids = [n * 7919 % 1009 - 500 for n in range(120)]
    for plant_id in ids:
        plant(plant_id)
    plants, pages = walk(client, auth, f"limit={limit}")
    assert [item["id"] for item in plants] == in_order(ids)
    if id_order:
        assert pages == max(1, -(-len(ids) // limit))


def test_the_link_keeps_the_query_and_works_under_a_proxy_prefix(make_app, auth):
    app = make_app(PLANTS_TRUSTED_PROXIES=1)
    client = app.test_client()
    for plant_id in range(3):
        client.post("/plants", json={"id": plant_id, "name": "Fern", "tag": "a b&c"}, headers=auth)
    headers = {
        **auth,
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "plants.example",
        "X-Forwarded-Prefix": "/store",
    }
    response = client.get("/plants?tags=a%20b%26c&limit=2", headers=headers)
    url = urlsplit(LINK.fullmatch(response.headers["Link"])["url"])
    assert (url.scheme, url.netloc, url.path) == ("https", "plants.example", "/store/plants")
    assert parse_qs(url.query) == {"tags": ["a b&c"], "limit": ["2"], "after": [response.json["next"]]}


@pytest.mark.parametrize(
    ("forwarded", "expected"),
    [
        ({"X-Forwarded-Proto": "javascript"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Proto": "HTTPS"}, ("https", "localhost", "/plants")),
        ({"X-Forwarded-Host": "a b"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Host": "x/#"}, ("http", "localhost", "/plants")),
        (
            {"X-Forwarded-Host": "plants.example", "X-Forwarded-Port": "8443x"},
            ("http", "localhost", "/plants"),
        ),
        ({"X-Forwarded-Host": "[2001:db8::1]:8443"}, ("http", "[2001:db8::1]:8443", "/plants")),
        ({"X-Forwarded-Port": "99999"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Port": "0"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Host": "[2001:db8::1]:65536"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Host": "plants_store"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Host": "[.]"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Host": "plants..example"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "/a b"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "javascript:x"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "//evil.example"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "/store//x"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "/%zz"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "/store%2"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "/store/.."}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "/store/%2e%2E/x"}, ("http", "localhost", "/plants")),
        ({"X-Forwarded-Prefix": "/caf%C3%A9"}, ("http", "localhost", "/caf%C3%A9/plants")),
        ({"X-Forwarded-Host": "xn--caf-dma.example"}, ("http", "xn--caf-dma.example", "/plants")),
    ],
    ids=[
        "scheme",
        "scheme-upper",
        "host-space",
        "host-path",
        "port",
        "ipv6-host",
        "port-past-65535",
        "port-0",
        "ipv6-host-port-past-65535",
        "host-underscore",
        "host-bracketed-no-address",
        "host-empty-label",
        "prefix-space",
        "prefix-scheme",
        "prefix-another-host",
        "prefix-empty-segment",
        "prefix-bad-percent-encoding",
        "prefix-cut-percent-encoding",
        "prefix-dot-segment",
        "prefix-encoded-dot-segment",
        "prefix-percent-encoded-utf-8",
        "host-idna",
    ],
)
def test_a_forwarded_value_that_is_not_one_leaves_the_links_and_locations_on_the_peers(
    auth, forwarded, expected
):
    """From a trusted proxy, a scheme other than http(s), a host that is not `host[:port]` (a port
    of 1 to 65535, a name Werkzeug builds URLs on) or a prefix that is not a path (a bad
    percent-encoding, a `.` or `..` segment a client resolves away) is not taken into
    the URLs handed out: the peer's own value stays, never `http:///plants` nor a 400. A valid one
    is written in them as sent, a page's `Link` too (it had `/café`, `café.example`).
    (On one store: the URLs are the app's, whichever store holds the plants.)"""
    client = create_app(
        {"TESTING": True, "PLANTS_API_TOKENS": [TOKEN], "PLANTS_TRUSTED_PROXIES": 1}
    ).test_client()
    headers = {**auth, **forwarded}
    created = client.put("/plants/1", json={"name": "Fern"}, headers=headers)  # 201 and its Location
    client.post("/plants", json={"id": 2, "name": "Fern"}, headers=auth)
    location = urlsplit(created.headers["Location"])
    assert (location.scheme, location.netloc, location.path) == (*expected[:2], f"{expected[2]}/1")
    page = client.get("/plants?limit=1", headers=headers)
    url = urlsplit(LINK.fullmatch(page.headers["Link"])["url"])
    assert (url.scheme, url.netloc, url.path) == expected


def test_plants_a_put_created_are_listed(client, auth, in_order):
    """On a cluster too, where a page reads only the groups its hints name: a PUT that creates a
    plant without a tag named its group in none, and the plant, stored and readable, was listed
    on no page."""
    for plant_id in (1, 2, 3, 1000, 123456):
        assert client.put(f"/plants/{plant_id}", json={"name": "Fern"}, headers=auth).status_code == 201
    plants, _ = walk(client, auth, "limit=2")
    assert [plant["id"] for plant in plants] == in_order([1, 2, 3, 1000, 123456])


@pytest.mark.parametrize("host", ["plant_store:8000", "localhost:99999"])
def test_a_host_no_url_can_be_built_on_is_handed_paths_that_resolve(auth, host):
    """A compose file's `plant_store` (an underscore) or a port past 65535, which Werkzeug reads
    as no host: the URLs handed out are path-absolute references (the client resolves them
    against the URL it asked), where they were `http:///plants/1`, which reaches nothing.
    (On one store: the URLs are the app's, whichever store holds the plants.)"""
    client = create_app({"TESTING": True, "PLANTS_API_TOKENS": [TOKEN]}).test_client()
    headers = {**auth, "Host": host}
    created = client.put("/plants/1", json={"name": "Fern"}, headers=headers)
    assert created.status_code == 201
    assert created.headers["Location"] == "/plants/1"
    for plant_id in (2, 3):
        client.put(f"/plants/{plant_id}", json={"name": "Ivy"}, headers=headers)
    seen, url = [], "/plants?limit=1"
    while url:
        page = client.get(url, headers=headers)
        seen += [plant["id"] for plant in page.json["plants"]]
        link = page.headers.get("Link")
        url = link and LINK.fullmatch(link)["url"]
        assert url is None or url.startswith("/plants?limit=1&after=")
    assert sorted(seen) == [1, 2, 3]


def test_a_forwarded_prefix_never_points_the_document_at_another_host(auth):
    """A `servers` URL of `//evil.example` would send "Try it out" (and its token) to that host."""
    client = create_app(
        {"TESTING": True, "PLANTS_API_TOKENS": [TOKEN], "PLANTS_TRUSTED_PROXIES": 1}
    ).test_client()
    for prefix, served in (("//evil.example", "/"), ("/store/", "/store"), ("/store", "/store")):
        document = client.get("/openapi.json", headers={"X-Forwarded-Prefix": prefix}).json
        assert document["servers"] == [{"url": served}]


def test_tags_filter_to_plants_with_one_of_them(client, auth, plant, in_order):
    for plant_id in range(30):
        plant(plant_id, tag=[None, "fern", "palm", "cactus", "Fern"][plant_id % 5])
    only_ferns, _ = walk(client, auth, "tags=fern&limit=2")
    assert [item["id"] for item in only_ferns] == in_order(range(1, 30, 5))
    assert all(item["tag"] == "fern" for item in only_ferns)
    two, _ = walk(client, auth, "tags=palm&tags=fern&limit=4")
    assert [item["id"] for item in two] == in_order([*range(1, 30, 5), *range(2, 30, 5)])
    nobody = client.get("/plants?tags=orchid", headers=auth)
    assert nobody.json == {"plants": []}
    repeated, _ = walk(client, auth, "tags=cactus&tags=cactus&limit=3")
    assert [item["id"] for item in repeated] == in_order(range(3, 30, 5))
    # A tag repeated counts once against the bound of 20: 21 values, 2 distinct.
    many, _ = walk(client, auth, "&".join(["tags=cactus"] * 20 + ["tags=palm", "limit=5"]))
    assert [item["id"] for item in many] == in_order([*range(2, 30, 5), *range(3, 30, 5)])


def test_tags_match_exactly_whatever_their_characters(client, auth, plant):
    odd = ["a:b", "{x}", "é", "多肉植物", "t" * 100, "a,b", " lead"]
    for plant_id, tag in enumerate(odd):
        plant(plant_id, tag=tag)
    for plant_id, tag in enumerate(odd):
        page = client.get("/plants", query_string={"tags": tag}, headers=auth).json
        assert page == {"plants": [{"id": plant_id, "name": f"plant {plant_id}", "tag": tag}]}


def test_a_tag_is_matched_as_written_without_unicode_normalization(client, auth, plant):
    composed, decomposed = "caf\u00e9", "cafe\u0301"  # one word, NFC and NFD: two tags
    plant(1, tag=composed)
    plant(2, tag=decomposed)
    for plant_id, tag in ((1, composed), (2, decomposed)):
        page = client.get("/plants", query_string={"tags": tag}, headers=auth).json
        assert page == {"plants": [{"id": plant_id, "name": f"plant {plant_id}", "tag": tag}]}
        events = client.get("/events", query_string={"tags": tag}, headers=auth).json["events"]
        assert [event["plant"]["id"] for event in events] == [plant_id]


def test_a_cursor_of_one_tags_filter_is_refused_on_another(client, auth, plant):
    for plant_id in range(4):
        plant(plant_id, tag="fern")
    cursor = client.get("/plants?tags=fern&limit=1", headers=auth).json["next"]
    record = error_of(client.get(f"/plants?after={cursor}", headers=auth), 400)
    assert set(record["details"]) == {"after"}
    record = error_of(client.get(f"/plants?tags=palm&after={cursor}", headers=auth), 400)
    assert set(record["details"]) == {"after"}
    # The order of the tags does not matter.
    cursor = client.get("/plants?tags=fern&tags=palm&limit=1", headers=auth).json["next"]
    same = client.get(f"/plants?tags=palm&tags=fern&after={cursor}", headers=auth)
    assert [item["id"] for item in same.json["plants"]] == [1, 2, 3]


@pytest.mark.parametrize(
    ("made_for", "used_for"),
    [
        ("", "?tags=*"),  # the unfiltered scope and a filter on the tag "*"
        ("?tags=a%00b", "?tags=a&tags=b"),  # one tag with a NUL and two tags
        ("?tags=a&tags=b", "?tags=a%00b"),
        ("?tags=ab", "?tags=a&tags=b"),
    ],
    ids=["none-and-star", "nul-joined-and-two", "two-and-nul-joined", "concatenated"],
)
def test_no_two_filters_share_a_cursor(client, auth, plant, made_for, used_for):
    for plant_id, tag in enumerate(["*", "a\0b", "a", "b", "ab"] * 2):
        plant(plant_id, tag=tag)
    separator = "&" if made_for else "?"
    cursor = client.get(f"/plants{made_for}{separator}limit=1", headers=auth).json["next"]
    record = error_of(client.get(f"/plants{used_for}&after={cursor}", headers=auth), 400)
    assert set(record["details"]) == {"after"}
    assert "start the walk again" in record["details"]["after"][0]


def _raw(cursor: str) -> bytes:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def forged(cursor: str) -> str:
    """The same cursor with one bit of its signature flipped, spelled as the service spells one."""
    raw = bytearray(_raw(cursor))
    raw[-1] ^= 0x80
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def respelled(cursor: str) -> str | None:
    """The same bytes with the last character's unused bits set, or None when it has none."""
    if len(_raw(cursor)) % 3 == 0:
        return None
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    unused = 0b1111 if len(_raw(cursor)) % 3 == 1 else 0b11
    return cursor[:-1] + alphabet[alphabet.index(cursor[-1]) | unused]


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=-1", "limit"),
        ("limit=abc", "limit"),
        ("limit=1.5", "limit"),
        ("limit=1e3x", "limit"),
        ("limit=2e3", "limit"),
        ("limit=", "limit"),
        ("limit=%2B5", "limit"),
        ("limit=1&limit=2", "limit"),
        ("after=", "after"),
        ("after=not*base64", "after"),
        ("after=" + "A" * 65, "after"),
        ("after=AAAA", "after"),
        ("after=AQAAAAAAAAABAAAAAAAAAAAAAAAA", "after"),  # the right shape, not signed
        ("after=a&after=b", "after"),
        ("tags=", "tags"),
        ("tags=" + "t" * 101, "tags"),
        ("&".join(f"tags=t{n}" for n in range(21)), "tags"),
        ("colour=green", "colour"),
        ("tag=fern", "tag"),
        ("Limit=5", "Limit"),
    ],
)
def test_a_bad_query_is_400_naming_the_parameter(client, auth, plant, query, parameter):
    plant(1)
    response = client.get(f"/plants?{query}", headers=auth)
    record = error_of(response, 400)
    assert set(record["details"]) == {parameter}
    assert parameter in record["message"]


def test_too_many_tags_is_a_400_that_counts_tags_not_characters(client, auth):
    """21 tags were refused with marshmallow's `Length must be between 1 and 20.`, which reads as a
    tag's length in characters (a tag may have 100, README): the message counts distinct tags."""
    query = "&".join(f"tags=t{n}" for n in range(21))
    details = error_of(client.get(f"/plants?{query}", headers=auth), 400)["details"]
    assert details["tags"] == ["At most 20 distinct tags (a value given twice counts once)."]


def test_a_forged_cursor_is_400(client, auth, plant):
    for plant_id in range(3):
        plant(plant_id)
    cursor = client.get("/plants?limit=1", headers=auth).json["next"]
    assert client.get(f"/plants?after={cursor}", headers=auth).status_code == 200
    record = error_of(client.get(f"/plants?after={forged(cursor)}", headers=auth), 400)
    assert set(record["details"]) == {"after"}


def test_a_cursor_is_only_the_spelling_the_service_wrote(client, auth, plant):
    """Base64 lets a last character carry bits that decoding drops, and padding; both are refused."""
    for plant_id in range(3):
        plant(plant_id)
    cursor = client.get("/plants?limit=1", headers=auth).json["next"]
    others = [cursor + "=", respelled(cursor)]  # a cluster's 22-byte cursor has 4 unused bits
    for other in filter(None, others):
        assert other != cursor
        record = error_of(client.get(f"/plants?after={other}", headers=auth), 400)
        assert set(record["details"]) == {"after"}


def test_a_cursor_of_another_store_is_refused(make_app, auth):
    """Each store signs with its own key (another Redis prefix is another store)."""
    first = make_app().test_client()
    second = make_app(PLANTS_STORE_PREFIX=f"other-{uuid.uuid4().hex}").test_client()
    for client in (first, second):
        for plant_id in range(3):
            client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth)
    cursor = first.get("/plants?limit=1", headers=auth).json["next"]
    error_of(second.get(f"/plants?after={cursor}", headers=auth), 400)


def test_every_bad_parameter_is_named_at_once(client, auth):
    record = error_of(client.get("/plants?limit=0&tags=&x=1", headers=auth), 400)
    assert set(record["details"]) == {"limit", "tags", "x"}


def test_a_page_resumes_after_a_deleted_cursor_plant(client, auth, plant, in_order):
    for plant_id in range(10):
        plant(plant_id)
    first = client.get("/plants?limit=3", headers=auth).json
    seen = [item["id"] for item in first["plants"]]
    assert seen == in_order(range(10))[:3]
    for plant_id in (seen[-1], in_order(range(10))[3]):
        assert client.delete(f"/plants/{plant_id}", headers=auth).status_code == 204
    rest, _ = walk(client, auth, f"after={first['next']}")
    assert [item["id"] for item in rest] == in_order(range(10))[4:]


@pytest.mark.parametrize("limit", ["3", "3.0", "0.3e1"])
def test_limit_is_read_as_an_integral_json_number(client, auth, plant, limit):
    for plant_id in range(5):
        plant(plant_id)
    page = client.get(f"/plants?limit={limit}", headers=auth).json
    assert [item["id"] for item in page["plants"]] == [0, 1, 2]


#: The page's script runs, and the commands each runs: index reads (a leaf's members, the next
#: fence) and a plant's hash.
PAGE_COMMANDS = ("zrangebylex", "hget", "evalsha")


@pytest.mark.parametrize("store_settings", ["redis", "cluster"], indirect=True)
def test_a_page_of_many_tags_makes_redis_read_about_what_one_tag_does(
    make_app, auth, store_settings, tmp_path, request
):
    """A read-only client paging 20 tags must not make Redis read every tag's page: the merge
    reads about a page plus a chunk per tag. Counted as Redis counts the commands the script runs
    (`INFO commandstats`: its calls, which no load changes); the time it takes is a figure of
    `python -m bench page-bound` (bench/README.md), not a test's.

    Pages of 1000, the largest, as bench/page_bound.py measures them."""

    # Redis counts commands server-wide: servers of the test's own, so no other test's count here.
    if store_settings["PLANTS_STORE_URL"].startswith("unix://"):
        servers: RedisServer | RedisClusterServers = RedisServer(tmp_path)
        own = redis_settings(servers)
    else:
        servers = RedisClusterServers(tmp_path)
        own = cluster_settings(servers)
    request.addfinalizer(servers.stop)
    store_settings = own
    app = make_app(**own)
    store = app.extensions["plants"].store
    tags = [f"tag-{n:02d}" for n in range(20)]
    for n, tag in enumerate(tags):
        for i in range(151):
            store.create(n + i * 20, f"plant {i}", tag)
    url = store_settings["PLANTS_STORE_URL"]
    if url.startswith("unix://"):
        nodes = [redis_py.Redis(unix_socket_path=url.removeprefix("unix://").split("?")[0])]
    else:
        nodes = [
            redis_py.Redis(host="127.0.0.1", port=int(a.split(":")[1])) for a in url.split("//")[1].split(",")
        ]

    def calls() -> dict[str, int]:
        stats = [node.info("commandstats") for node in nodes]
        counted = {name: 0 for name in PAGE_COMMANDS}
        for each in stats:
            for name in PAGE_COMMANDS:
                counted[name] += each.get(f"cmdstat_{name}", {"calls": 0})["calls"]
        return counted

    client = app.test_client()

    def walk(query):
        before, seen, after = calls(), [], ""
        while True:
            page = client.get(f"/plants?{query}&limit=1000{after}", headers=auth).json
            seen += [plant["id"] for plant in page["plants"]]
            if "next" not in page:
                return {name: count - before[name] for name, count in calls().items()}, seen
            after = f"&after={page['next']}"

    walk("tags=tag-00")  # loads the script everywhere
    one, one_ids = walk("tags=tag-00")
    many, many_ids = walk("&".join(f"tags={tag}" for tag in tags))
    assert len(one_ids) == 151
    assert len(many_ids) == 20 * 151 == len(set(many_ids))
    # A plant's hash is read once, for the page that answers it.
    assert one["hget"] == len(one_ids)
    assert many["hget"] == len(many_ids)
    # Each run of the script reads each tag's index in chunks (a page / tags, at least 8), and
    # looks up the next fence where a leaf ends: leaves of fewer than 64 members, each but the
    # last at least 32, so a tag of 151 plants created in id order is four leaves, 8 reads when
    # read whole. Measured: 8 for the one tag on one Redis (2 a run on the cluster), 3.8 a tag
    # a run for the 20 on one Redis, 2.25 on the cluster. Reading member by member would be
    # 3,020 and more.
    assert one["zrangebylex"] <= 8 * one["evalsha"]
    assert many["zrangebylex"] <= 5 * len(tags) * many["evalsha"]


def cluster_nodes(store_settings) -> list[redis_py.Redis]:
    addresses = store_settings["PLANTS_STORE_URL"].split("//")[1].split(",")
    return [redis_py.Redis(host="127.0.0.1", port=int(address.split(":")[1])) for address in addresses]


def hint_sets(store_settings) -> set[bytes]:
    """The hint sets' keys, each once (a replica holds its primary's too)."""
    pattern = f"{{{store_settings['PLANTS_STORE_PREFIX']}}}:groups:*"
    nodes = cluster_nodes(store_settings)
    return {key for node in nodes for key in node.scan_iter(match=pattern, count=1000)}


@pytest.mark.parametrize("store_settings", ["cluster"], indirect=True)
def test_tags_a_client_invents_leave_a_bounded_number_of_keys(make_app, auth, store_settings):
    """A cluster's hints (which groups a tag's plants were in) are never removed, so they are shared
    by the tags: creating and deleting plants of 1,500 new tags leaves at most TAG_HINTS + 1 sets,
    and every tag's page still finds its plants."""
    client = make_app().test_client()
    for n in range(1500):
        body = {"id": n, "name": f"plant {n}", "tag": f"invented-{n}"}
        assert until_not_503(lambda b=body: client.post("/plants", json=b, headers=auth)).status_code == 200
        if n % 10:
            assert until_not_503(lambda n=n: client.delete(f"/plants/{n}", headers=auth)).status_code == 204
    assert len(hint_sets(store_settings)) <= TAG_HINTS + 1
    for n in range(0, 1500, 10):
        assert [p["name"] for p in walk(client, auth, f"tags=invented-{n}")[0]] == [f"plant {n}"]


@pytest.mark.parametrize("store_settings", ["cluster"], indirect=True)
def test_a_tag_hint_written_before_1_5_0_is_still_read(make_app, auth, store_settings, plant):
    """During a rolling upgrade an older worker notes a tag's group in a set of its own
    (`groups:t<tag>`): a page of that tag must still read the group."""
    client = make_app().test_client()
    plant(7, tag="old")
    prefix = store_settings["PLANTS_STORE_PREFIX"]
    (key,) = [key for key in hint_sets(store_settings) if key.endswith(f":groups:{tag_hint('old')}".encode())]
    for node in cluster_nodes(store_settings):  # as if an older worker had noted it
        try:
            node.rename(key, f"{{{prefix}}}:groups:told")
            break
        except redis_py.ResponseError:  # MOVED: another node holds it
            continue
    assert [p["name"] for p in walk(client, auth, "tags=old")[0]] == ["plant 7"]
