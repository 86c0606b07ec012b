"""Webhook deliveries to a real receiver on 127.0.0.1, verified with `standardwebhooks`: on the
memory store, a real Redis and a real Redis Cluster. Order, retries and their schedule,
Retry-After, 410, failing and resuming, rotation, redirects, timeouts, the address checked again
at each delivery, the feed's retention, replay, metrics, and the deliverer on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.extension import plants_state
from app.webhooks.keepalive import IDLE_S
from tests.conftest import STORES_AND_CLUSTER, redis_settings, settings_for_store
from tests.contract.test_metrics import samples
from tests.receiver import Receiver, StalledReceiver
from tests.servers import TOKEN, RedisServer

AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: The schedule at a thousandth: 5 ms, 0.3 s, 1.8 s, 7.2 s, 18 s, 36 s, 50.4 s, 72 s, 86.4 s,
#: each within ±20%.
SCALE = 0.001


@pytest.fixture(params=STORES_AND_CLUSTER)
def store_settings(request):
    return settings_for_store(request, request.param)


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture
def service(make_app):
    """The service under test, delivering from this process, to 127.0.0.1 only."""
    return make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_RETRY_SCALE=SCALE)


@pytest.fixture
def client(service):
    return service.test_client()


def register(client, url: str, **body) -> dict:
    response = client.post("/webhooks", json={"url": url, **body}, headers=AUTH)
    assert response.status_code == 201, response.json
    return response.json


def create(client, *ids: int) -> None:
    for plant_id in ids:
        assert (
            client.post(
                "/plants", json={"id": plant_id, "name": f"Fern {plant_id}"}, headers=AUTH
            ).status_code
            == 200
        )


def endpoint(client, hook: dict) -> dict:
    return client.get(f"/webhooks/{hook['id']}", headers=AUTH).json


def attempts(client, hook: dict) -> list[dict]:
    return client.get(f"/webhooks/{hook['id']}/attempts", headers=AUTH).json["attempts"]


def wait_until(condition, timeout: float = 20.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} did not hold within {timeout} s")


def test_each_change_is_delivered_signed_once_and_in_order(client, receiver, store_settings):
    hook = register(client, receiver.url)
    create(client, 1, 2)
    client.put("/plants/1", json={"name": "Fern 1", "tag": "green"}, headers=AUTH)
    client.delete("/plants/2", headers=AUTH)
    deliveries = receiver.wait_for(4)
    events = [delivery.verified(hook["secret"]) for delivery in deliveries]
    changes = [(event["type"], event["data"]) for event in events]
    expected = [
        ("plant.created", {"id": 1, "name": "Fern 1"}),
        ("plant.created", {"id": 2, "name": "Fern 2"}),
        ("plant.updated", {"id": 1, "name": "Fern 1", "tag": "green"}),
        ("plant.deleted", {"id": 2, "name": "Fern 2"}),
    ]
    if "cluster" in store_settings.get("PLANTS_STORE_URL", ""):
        # Plants 1 and 2 are in different bucket groups: in order for each plant, as in the feed.
        assert sorted(changes, key=lambda change: change[1]["id"]) == sorted(
            expected, key=lambda c: c[1]["id"]
        )
    else:
        assert changes == expected
        feed = client.get("/events", headers=AUTH).json["events"]
        assert [event["timestamp"] for event in events] == [event["time"] for event in feed]
    assert len({delivery.id for delivery in deliveries}) == 4
    first = deliveries[0]
    assert first.path == "/hook"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["user-agent"].startswith("plant-store/")
    assert abs(int(first.headers["webhook-timestamp"]) - time.time()) < 30
    assert first.headers["webhook-signature"].startswith("v1,")
    time.sleep(0.5)
    assert len(receiver.deliveries) == 4  # no duplicate without a cause
    recorded = wait_until(lambda: len(attempts(client, hook)) == 4 and attempts(client, hook))
    assert [attempt["webhook_id"] for attempt in recorded] == [d.id for d in reversed(deliveries)]
    assert all(attempt["status"] == 204 and attempt["error"] is None for attempt in recorded)


def test_a_new_endpoint_gets_only_later_events(client, receiver):
    create(client, 1)
    hook = register(client, receiver.url)
    create(client, 2)
    (delivery,) = receiver.wait_for(1)
    assert delivery.verified(hook["secret"])["data"]["id"] == 2


def test_an_endpoint_gets_only_the_types_it_lists(client, receiver):
    hook = register(client, receiver.url, events=["plant.deleted"])
    create(client, 1, 2)
    client.delete("/plants/1", headers=AUTH)
    (delivery,) = receiver.wait_for(1)
    assert delivery.verified(hook["secret"]) == {**delivery.event, "type": "plant.deleted"}
    time.sleep(0.3)
    assert len(receiver.deliveries) == 1


def test_a_failing_receiver_gets_the_same_event_again_until_it_recovers_and_order_holds(client):
    receiver = Receiver(lambda delivery, number: (500, {}, 0) if number <= 2 else (200, {}, 0))
    try:
        hook = register(client, receiver.url)
        create(client, 1, 2)
        deliveries = receiver.wait_for(4)
        ids = [delivery.id for delivery in deliveries]
        assert ids[0] == ids[1] == ids[2] != ids[3]
        assert [delivery.event["data"]["id"] for delivery in deliveries] == [1, 1, 1, 2]
        # 5 ms after the first failure, 0.3 s after the second (the schedule at a thousandth, ±20%).
        assert deliveries[2].at - deliveries[1].at >= 0.23
        recorded = wait_until(lambda: len(attempts(client, hook)) == 4 and attempts(client, hook))
        assert [attempt["status"] for attempt in reversed(recorded)] == [500, 500, 200, 200]
        assert endpoint(client, hook)["status"] == "enabled"
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_retry_after_of_a_503_lengthens_the_wait(client):
    receiver = Receiver(
        lambda delivery, number: (503, {"Retry-After": "1"}, 0) if number == 1 else (204, {}, 0)
    )
    try:
        register(client, receiver.url)
        create(client, 1)
        first, second = receiver.wait_for(2)
        assert first.id == second.id
        assert second.at - first.at >= 0.95  # not the 5 ms of the schedule
    finally:
        receiver.stop()


def test_a_410_disables_the_endpoint_and_enabling_resumes_from_that_event(client):
    receiver = Receiver(lambda delivery, number: (410, {}, 0) if number == 1 else (204, {}, 0))
    try:
        hook = register(client, receiver.url)
        create(client, 1, 2)
        wait_until(lambda: endpoint(client, hook)["status"] == "disabled", what="disabled")
        assert "410" in endpoint(client, hook)["status_reason"]
        time.sleep(0.3)
        assert len(receiver.deliveries) == 1
        client.patch(f"/webhooks/{hook['id']}", json={"status": "enabled"}, headers=AUTH)
        deliveries = receiver.wait_for(3)
        assert [delivery.event["data"]["id"] for delivery in deliveries] == [1, 1, 2]
        assert deliveries[0].id == deliveries[1].id
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["memory", "redis"], indirect=True)
def test_after_the_last_retry_the_endpoint_is_failing_and_holds_the_event(make_app):
    # At a hundred-thousandth the 10 attempts take about 3 s in all.
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_RETRY_SCALE=0.00001
    ).test_client()
    failing = [True]
    receiver = Receiver(lambda delivery, number: (500, {}, 0) if failing[0] else (204, {}, 0))
    try:
        hook = register(client, receiver.url)
        create(client, 1, 2)
        wait_until(lambda: endpoint(client, hook)["status"] == "failing", timeout=30, what="failing")
        assert len(receiver.deliveries) == 10
        assert {delivery.id for delivery in receiver.deliveries} == {receiver.deliveries[0].id}
        assert "10 attempts" in endpoint(client, hook)["status_reason"]
        assert endpoint(client, hook)["next_attempt"] is None
        time.sleep(0.3)
        assert len(receiver.deliveries) == 10
        failing[0] = False
        client.patch(f"/webhooks/{hook['id']}", json={"status": "enabled"}, headers=AUTH)
        deliveries = receiver.wait_for(12)
        assert [delivery.event["data"]["id"] for delivery in deliveries[10:]] == [1, 2]
        assert deliveries[10].id == deliveries[0].id
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_after_rotation_both_secrets_sign_and_both_verify(client, receiver):
    hook = register(client, receiver.url)
    rotated = client.post(f"/webhooks/{hook['id']}/rotate", headers=AUTH).json
    create(client, 1)
    (delivery,) = receiver.wait_for(1)
    assert len(delivery.headers["webhook-signature"].split(" ")) == 2
    assert delivery.verified(hook["secret"]) == delivery.verified(rotated["secret"])


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_the_old_secret_stops_signing_after_the_overlap(make_app, receiver):
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_ROTATION_OVERLAP=0
    ).test_client()
    hook = register(client, receiver.url)
    rotated = client.post(f"/webhooks/{hook['id']}/rotate", headers=AUTH).json
    create(client, 1)
    (delivery,) = receiver.wait_for(1)
    assert len(delivery.headers["webhook-signature"].split(" ")) == 1
    delivery.verified(rotated["secret"])
    with pytest.raises(Exception, match="No matching signature"):
        delivery.verified(hook["secret"])


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_a_redirect_is_a_failed_attempt_and_is_not_followed(client):
    target = Receiver()
    receiver = Receiver(
        lambda delivery, number: (302, {"Location": target.url}, 0) if number == 1 else (204, {}, 0)
    )
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        receiver.wait_for(2)
        recorded = wait_until(lambda: len(attempts(client, hook)) == 2 and attempts(client, hook))
        assert (recorded[-1]["status"], recorded[-1]["error"]) == (302, "redirect")
        assert target.deliveries == []
    finally:
        receiver.stop()
        target.stop()


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_a_receiver_slower_than_the_timeout_is_a_timeout(make_app):
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_TIMEOUT=0.3,
        PLANTS_WEBHOOKS_RETRY_SCALE=SCALE,
    ).test_client()
    receiver = Receiver(lambda delivery, number: (204, {}, 1.0) if number == 1 else (204, {}, 0))
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        receiver.wait_for(2)
        recorded = wait_until(lambda: len(attempts(client, hook)) == 2 and attempts(client, hook))
        assert recorded[-1]["error"] == "timeout", (recorded, receiver.ids)
        assert recorded[-1]["status"] is None
        assert recorded[0]["status"] == 204
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_https_to_a_receiver_that_speaks_no_tls_is_a_tls_failure(client, receiver):
    hook = register(client, receiver.url.replace("http://", "https://"))
    create(client, 1)
    recorded = wait_until(lambda: attempts(client, hook), what="an attempt")
    assert recorded[-1]["error"] == "tls"


@pytest.mark.parametrize("store_settings", ["memory", "redis"], indirect=True)
def test_every_secret_rotated_out_within_the_overlap_keeps_signing(client, receiver):
    """Five rotations within the overlap: the first secret still verifies (it was dropped once
    four newer ones signed)."""
    hook = register(client, receiver.url)
    secrets = [hook["secret"]]
    for _ in range(5):
        secrets.append(client.post(f"/webhooks/{hook['id']}/rotate", headers=AUTH).json["secret"])
    create(client, 1)
    (delivery,) = receiver.wait_for(1)
    assert len(delivery.headers["webhook-signature"].split(" ")) == 6
    for secret in secrets:
        delivery.verified(secret)


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)  # two services on one store
def test_each_rotated_out_secret_stops_signing_when_its_own_overlap_ends(make_app, receiver):
    """A rotated-out secret signs until the overlap of its own rotation ends: the first is rotated
    out by a service whose overlap is 1 s, the second by one whose overlap is an hour. Once the
    first's has ended, deliveries carry the third and the second, not the first; were both dropped
    at the first's end, one signature; were the first kept to the latest end, an hour of three."""
    short = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_ROTATION_OVERLAP=1)
    long = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_ROTATION_OVERLAP=3600)
    client = short.test_client()
    first = register(client, receiver.url)
    second = client.post(f"/webhooks/{first['id']}/rotate", headers=AUTH).json  # first: 1 s more
    third = long.test_client().post(f"/webhooks/{first['id']}/rotate", headers=AUTH).json  # second: an hour
    created = iter(range(1, 10_000))

    def signed_by_fewer_than_three():
        plant_id = next(created)
        create(client, plant_id)  # a delivery each, signed with the secrets of its moment
        return [d for d in receiver.wait_for(plant_id) if len(d.headers["webhook-signature"].split(" ")) < 3]

    delivery = wait_until(signed_by_fewer_than_three, timeout=30, what="the first secret's end")[0]
    assert len(delivery.headers["webhook-signature"].split(" ")) == 2
    delivery.verified(third["secret"])
    delivery.verified(second["secret"])
    with pytest.raises(Exception, match="No matching signature"):
        delivery.verified(first["secret"])


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_a_host_that_does_not_resolve_is_a_failed_attempt(client):
    hook = register(client, "http://no-such-host.invalid/hook")
    create(client, 1)
    recorded = wait_until(lambda: attempts(client, hook), what="an attempt")
    assert recorded[-1]["error"] == "name_not_resolved"
    assert recorded[-1]["status"] is None


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_a_refused_connection_is_retried_and_readiness_does_not_depend_on_it(client):
    hook = register(client, "http://127.0.0.1:9/nobody")
    create(client, 1)
    recorded = wait_until(lambda: attempts(client, hook), what="an attempt")
    assert client.get("/readyz").status_code == 200
    assert recorded[-1]["error"] == "refused"
    assert recorded[-1]["status"] is None


@pytest.mark.parametrize("store_settings", ["redis", "cluster"], indirect=True)
def test_the_address_is_checked_again_at_each_delivery(make_app, receiver):
    """Two services on one shared store: the one that delivers does not allow 127.0.0.1."""
    registrar = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False).test_client()
    hook = register(registrar, receiver.url)
    # Another service on the same store, which does not allow 127.0.0.1, delivers.
    deliverer = make_app(PLANTS_WEBHOOKS_RETRY_SCALE=SCALE)
    deliverer.extensions["plants"].deliverer.start()
    create(registrar, 1)
    recorded = wait_until(lambda: attempts(registrar, hook), what="an attempt")
    assert recorded[-1]["error"] == "address"
    assert receiver.deliveries == []


def test_replay_from_the_start_sends_the_events_again_with_their_ids(client, receiver):
    hook = register(client, receiver.url)
    create(client, 1, 2)
    first = receiver.wait_for(2)
    assert (
        client.post(f"/webhooks/{hook['id']}/replay", json={"after": "start"}, headers=AUTH).status_code
        == 202
    )
    again = receiver.wait_for(4)[2:]
    assert [d.id for d in again] == [d.id for d in first]
    assert [d.body for d in again] == [d.body for d in first]


def test_replay_from_a_feed_cursor_sends_what_follows_it(client, receiver):
    hook = register(client, receiver.url)
    create(client, 1)
    cursor = client.get("/events?after=now", headers=AUTH).json["next"]
    create(client, 2)
    receiver.wait_for(2)
    client.post(f"/webhooks/{hook['id']}/replay", json={"after": cursor}, headers=AUTH)
    third = receiver.wait_for(3)[2]
    assert third.event["data"]["id"] == 2
    assert third.id == receiver.deliveries[1].id


def test_a_position_that_left_the_feed_says_so_and_resumes_from_the_oldest_kept(make_app, receiver):
    client = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_EVENTS_RETAIN=5).test_client()
    hook = register(client, receiver.url)
    client.patch(f"/webhooks/{hook['id']}", json={"status": "disabled"}, headers=AUTH)
    # Redis trims a stream by whole nodes of 100 entries: 250 events leave some behind. The ids
    # are multiples of 24, so that on a cluster they all fall in one bucket group, one stream.
    create(client, *range(24, 24 * 251, 24))
    client.patch(f"/webhooks/{hook['id']}", json={"status": "enabled"}, headers=AUTH)
    recorded = wait_until(
        lambda: [a for a in attempts(client, hook) if a["error"] == "expired"], what="a note"
    )
    assert recorded[0]["webhook_id"] is None
    assert "lost" in endpoint(client, hook)["status_reason"]
    receiver.wait_for(5)
    wait_until(lambda: receiver.deliveries[-1].event["data"]["id"] == 24 * 250, what="the last event")
    ids = [delivery.event["data"]["id"] for delivery in receiver.deliveries]
    assert ids == sorted(ids)
    assert ids[0] > 24


def test_deliveries_are_counted_in_the_metrics(client, receiver):
    hook = register(client, receiver.url)
    create(client, 1, 2)
    receiver.wait_for(2)
    wait_until(lambda: len(attempts(client, hook)) == 2)
    lag = ("plants_webhook_lag_events", (("endpoint", hook["id"]),))
    client.patch(f"/webhooks/{hook['id']}", json={"status": "disabled"}, headers=AUTH)
    create(client, 3)
    # The lag is the events not yet sent: 1 while the endpoint is paused, 0 once it caught up.
    wait_until(lambda: scrape(client).get(lag) == 1.0, what="a lag of 1")
    client.patch(f"/webhooks/{hook['id']}", json={"status": "enabled"}, headers=AUTH)
    receiver.wait_for(3)
    wait_until(lambda: scrape(client).get(lag) == 0.0, what="a lag of 0")
    counted = scrape(client)
    assert counted[("plants_webhook_attempts_total", (("outcome", "delivered"),))] == 3.0
    assert counted[("plants_webhook_delivery_seconds_count", ())] == 3.0


def attempts_counted(service, outcome: str) -> float:
    """The attempts of `outcome` that `service` counted, read in its process, not from its store."""
    metrics = plants_state(service).metrics
    assert metrics is not None
    # This counter's own samples: the registry's collection reads the store too (the plants).
    return sum(
        sample.value
        for family in metrics.webhook_attempts.collect()
        for sample in family.samples
        if sample.name == "plants_webhook_attempts_total" and sample.labels == {"outcome": outcome}
    )


def scrape(client) -> dict:
    return samples(client.get("/metrics", headers=AUTH).get_data(as_text=True))


def deliverer_on_its_own(
    settings: dict[str, str], python_args: tuple[str, ...] = ("-m", "app.webhooks")
) -> subprocess.Popen:
    """`python -m app.webhooks` (or `python_args`) with `settings` beside the environment, its
    output piped."""
    return subprocess.Popen(
        [sys.executable, *python_args],
        env={**os.environ, **settings},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_deliverer_on_its_own_delivers(redis_server, receiver, tmp_path):
    settings = {
        **redis_settings(redis_server),
        "PLANTS_API_TOKENS": TOKEN,
        "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
    }
    from app import create_app

    app = create_app({**settings, "PLANTS_WEBHOOKS_DELIVER": False})
    client = app.test_client()
    hook = register(client, receiver.url)
    process = deliverer_on_its_own(settings)
    try:
        create(client, 1, 2)
        deliveries = receiver.wait_for(2)
        assert [d.verified(hook["secret"])["data"]["id"] for d in deliveries] == [1, 2]
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert "delivering webhooks" in output
    assert TOKEN not in output


def test_a_deliverer_on_its_own_reads_its_settings_again_on_sighup(redis_server, receiver, tmp_path):
    """SIGHUP (`systemctl reload`, a closed terminal) killed it: its attempt in flight was sent
    again and the next events waited out its lease. It reads its settings again; refused ones
    keep it delivering as before."""
    store_url = redis_settings(redis_server)
    url_file = tmp_path / "store-url"
    url_file.write_text(store_url["PLANTS_STORE_URL"])
    settings = {
        "PLANTS_STORE_URL_FILE": str(url_file),
        "PLANTS_STORE_PREFIX": store_url["PLANTS_STORE_PREFIX"],
        "PLANTS_API_TOKENS": TOKEN,
        "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
    }
    from app import create_app

    client = create_app({**store_url, **settings, "PLANTS_WEBHOOKS_DELIVER": False}).test_client()
    hook = register(client, receiver.url)
    process = deliverer_on_its_own(settings)
    try:
        create(client, 1)
        receiver.wait_for(1)
        process.send_signal(signal.SIGHUP)
        create(client, 2)
        receiver.wait_for(2)
        url_file.write_text("nonsense://plants:hunter2@127.0.0.1")
        process.send_signal(signal.SIGHUP)
        create(client, 3)
        deliveries = receiver.wait_for(3)
        assert process.poll() is None
        assert [d.verified(hook["secret"])["data"]["id"] for d in deliveries] == [1, 2, 3]
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert output.count("delivering webhooks") == 2
    assert "Reload refused, delivering as before" in output
    assert "PLANTS_STORE_URL_FILE" in output
    assert "hunter2" not in output
    assert TOKEN not in output


def test_a_deliverer_on_its_own_refuses_the_memory_store():
    env = {**os.environ, "PLANTS_API_TOKENS": TOKEN}
    env.pop("PLANTS_STORE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "app.webhooks"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert "needs a shared store" in done.stderr


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # the sender alone: no store in it
def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_timeout(make_app):
    """Each read waits anew, so a byte a while would hold a delivery thread for ever: the
    deliverer's watchdog ends the attempt at PLANTS_WEBHOOKS_TIMEOUT."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.is_set():
            try:
                connection.sendall(b"X")  # one header byte every 0.1 s, never a line's end
            except OSError:
                return
            time.sleep(0.1)

    threading.Thread(target=trickle, daemon=True).start()
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_TIMEOUT=0.5,
        PLANTS_WEBHOOKS_RETRY_SCALE=SCALE,
    ).test_client()
    try:
        hook = register(client, f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
        create(client, 1)
        recorded = wait_until(lambda: attempts(client, hook), timeout=10, what="an attempt")
        # Recorded at all: the trickle goes on until the test ends, so only the timeout ends it.
        assert recorded[-1]["error"] == "timeout", (recorded, receiver.ids)
    finally:
        stop.set()
        listener.close()


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # a Redis of its own, hung below
def test_a_hung_store_does_not_stretch_an_attempt_past_its_timeout(make_app, tmp_path):
    """The receiver trickles its answer (each read is quick, the attempt never ends), and Redis
    hangs (SIGSTOP) as the request arrives: the attempt's connection is still shut at
    PLANTS_WEBHOOKS_TIMEOUT, not once a call to the store times out (PLANTS_STORE_TIMEOUT, an hour
    here, and Redis hung until the connection is shut)."""
    import select
    import signal
    import socket
    import threading

    redis = RedisServer(tmp_path)
    listener = socket.create_server(("127.0.0.1", 0))
    arrived, closed = threading.Event(), threading.Event()

    def trickle() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            arrived.set()
            connection.sendall(b"HTTP/1.1 200 OK\r\n")
            try:
                # One header byte every 0.1 s, never a line's end, until the sender shuts it.
                while not select.select([connection], [], [], 0.1)[0] or connection.recv(65536):
                    connection.sendall(b"X")
            except OSError:
                pass
            closed.set()

    threading.Thread(target=trickle, daemon=True).start()
    client = make_app(
        **redis_settings(redis),
        PLANTS_STORE_TIMEOUT=3600,
        PLANTS_WEBHOOKS_TIMEOUT=1,
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_RETRY_SCALE=SCALE,
    ).test_client()
    try:
        register(client, f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
        create(client, 1)
        assert arrived.wait(10)
        redis.signal(signal.SIGSTOP)
        try:
            assert closed.wait(30), "shut when the store answered, not at the attempt's 1 s"
        finally:
            redis.signal(signal.SIGCONT)
    finally:
        listener.close()
        redis.stop()


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)  # a Redis of its own, hung below
def test_a_hung_store_does_not_stretch_the_check_of_an_attempt_slow_to_connect(make_app, tmp_path):
    """An attempt that took long to connect reads its endpoint again before it writes its request:
    with Redis hung (SIGSTOP) meanwhile, that read ends at the attempt's deadline, and the
    attempt is a timeout of PLANTS_WEBHOOKS_TIMEOUT, not of as long as Redis stays hung (until the
    connection is shut, with PLANTS_STORE_TIMEOUT an hour)."""
    import signal

    redis = RedisServer(tmp_path)
    receiver = StalledReceiver()
    service = make_app(
        **redis_settings(redis),
        PLANTS_STORE_TIMEOUT=3600,
        PLANTS_WEBHOOKS_TIMEOUT=2,
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1",
        PLANTS_WEBHOOKS_RETRY_SCALE=1,
    )
    client = service.test_client()
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        wait_until(receiver.senders_stalled, timeout=10, what="a connection under way")
        redis.signal(signal.SIGSTOP)
        # Its SYN sent again (a second after the first) is accepted: connected, slowly.
        receiver.release()
        try:
            # Counted in the process as it ends, before it is stored: while Redis is still hung.
            wait_until(lambda: attempts_counted(service, "timeout"), timeout=30, what="the attempt's end")
        finally:
            redis.signal(signal.SIGCONT)
        recorded = wait_until(lambda: attempts(client, hook), timeout=10, what="an attempt")
        assert recorded[-1]["error"] == "timeout", (recorded, receiver.ids)
        assert receiver.ids == []  # nothing written past its deadline
    finally:
        receiver.stop()
        redis.stop()


def test_deliveries_share_one_kept_connection_and_each_carries_its_writes_request_id(make_app, receiver):
    """A trusted proxy's X-Request-Id, or the one the service made and answered with, arrives
    with the delivery of the write's event, outside the signed content."""
    client = make_app(
        PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_RETRY_SCALE=SCALE, PLANTS_TRUSTED_PROXIES=1
    ).test_client()
    hook = register(client, receiver.url)
    writes = [
        client.post("/plants", json={"id": 1, "name": "Fern"}, headers={**AUTH, "X-Request-Id": "edge-1:a"}),
        client.post("/plants", json={"id": 2, "name": "Palm"}, headers=AUTH),
        client.put("/plants/1", json={"name": "Fern", "tag": "green"}, headers=AUTH),
        client.patch(
            "/plants/2", json={"tag": "tall"}, headers=AUTH, content_type="application/merge-patch+json"
        ),
        client.delete("/plants/2", headers=AUTH),
    ]
    assert [write.status_code for write in writes] == [200, 200, 200, 200, 204]
    sent = [write.headers["X-Request-Id"] for write in writes]
    assert sent[0] == "edge-1:a"
    deliveries = receiver.wait_for(5)
    for delivery in deliveries:
        delivery.verified(hook["secret"])
    # In order within each plant (on a cluster, plants 1 and 2 are in different groups).
    by_plant = [[d.headers["x-request-id"] for d in deliveries if d.event["data"]["id"] == n] for n in (1, 2)]
    assert by_plant == [[sent[0], sent[2]], [sent[1], sent[3], sent[4]]]
    assert "traceparent" not in deliveries[0].headers  # no tracing
    # One connection for all five (the idle bound is 10 s).
    assert len(set(receiver.connections())) == 1


def test_a_changed_url_or_a_deleted_endpoint_closes_its_kept_connection(service, client, receiver):
    connections = service.extensions["plants"].deliverer.connections
    hook = register(client, receiver.url)
    create(client, 1)
    receiver.wait_for(1)
    wait_until(lambda: len(connections) == 1, what="a kept connection")
    changed = client.patch(f"/webhooks/{hook['id']}", json={"url": receiver.url + "?v=2"}, headers=AUTH)
    assert changed.status_code == 200, changed.json
    create(client, 2)
    first, second = receiver.wait_for(2)
    assert second.path == "/hook?v=2"
    assert first.peer != second.peer
    assert client.delete(f"/webhooks/{hook['id']}", headers=AUTH).status_code == 204
    # Closed with the endpoint, well before IDLE_S would close it as an idle one.
    wait_until(
        lambda: len(connections) == 0, timeout=IDLE_S / 2, what="the deleted endpoint's connection closed"
    )


@pytest.mark.parametrize(
    ("first_answer_s", "changed_when"),
    [
        # The first answer asks for an hour (capped at 24 h of the schedule's scale: 86 s here).
        (0, "a pending retry"),
        # The first attempt to the old URL is still waiting for its answer when the URL changes:
        # its failure (a retry an hour away) must not hold the event back from the new URL.
        (2.0, "the first attempt under way"),
    ],
)
def test_a_new_url_gets_the_event_at_once(client, first_answer_s, changed_when):
    receiver = Receiver(
        lambda delivery, number: (
            (503, {"Retry-After": "3600"}, first_answer_s) if number == 1 else (204, {}, 0)
        )
    )
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        if changed_when == "a pending retry":
            wait_until(lambda: endpoint(client, hook)["next_attempt"], what=changed_when)
        else:
            wait_until(lambda: len(receiver.deliveries) == 1, what=changed_when)
        changed = client.patch(f"/webhooks/{hook['id']}", json={"url": receiver.url + "?v=2"}, headers=AUTH)
        assert changed.status_code == 200, changed.json
        first, second = receiver.wait_for(2, timeout=15)
        assert (first.path, second.path, second.id, second.event["data"]["id"]) == (
            "/hook",
            "/hook?v=2",
            first.id,
            1,
        )
        wait_until(lambda: endpoint(client, hook)["next_attempt"] is None, what="no retry pending")
    finally:
        receiver.stop()


def creates_wait_an_hour() -> Receiver:
    """A receiver that answers a creation 503 with an hour's Retry-After, and the rest 204."""
    return Receiver(
        lambda delivery, number: (
            (503, {"Retry-After": "3600"}, 0) if delivery.event["type"] == "plant.created" else (204, {}, 0)
        )
    )


@pytest.mark.parametrize("store_settings", ["memory", "redis"], indirect=True)
def test_a_type_no_longer_listed_does_not_hold_the_next_events_behind_its_retry(client):
    """The held event's retry is an hour away (a 503's Retry-After; 86 s at this scale) when the
    endpoint stops listing its type: the next event of a type it lists goes at once."""
    receiver = creates_wait_an_hour()
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        wait_until(lambda: endpoint(client, hook)["next_attempt"], what="a retry pending")
        asked = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        changed = client.patch(f"/webhooks/{hook['id']}", json={"events": ["plant.deleted"]}, headers=AUTH)
        assert changed.status_code == 200, changed.json
        # Due now (RFC 3339 texts in UTC compare as times), or already done.
        assert (changed.json["next_attempt"] or asked) >= asked, changed.json
        assert client.delete("/plants/1", headers=AUTH).status_code == 204
        first, second = receiver.wait_for(2, timeout=15)
        assert (first.event["type"], second.event["type"], second.event["data"]["id"]) == (
            "plant.created",
            "plant.deleted",
            1,
        )
        wait_until(lambda: endpoint(client, hook)["next_attempt"] is None, what="no retry pending")
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["memory", "redis"], indirect=True)
def test_a_type_dropped_while_its_retry_is_under_way_is_skipped_when_it_fails(client):
    """The held event's retry is under way (the receiver holds its answer) when the endpoint stops
    listing its type; the retry then fails with an hour's Retry-After (86 s at this scale). The
    PATCH asked for the event to be skipped at once: that failure's wait does not undo it, and
    the next event of a type it lists goes at once."""
    hold_s = 1.0

    def answer(delivery, number):
        if delivery.event["type"] != "plant.created":
            return 204, {}, 0
        return (503, {}, 0) if number == 1 else (503, {"Retry-After": "3600"}, hold_s)

    receiver = Receiver(answer)
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        receiver.wait_for(2, timeout=10)  # the retry, held
        changed = client.patch(f"/webhooks/{hook['id']}", json={"events": ["plant.deleted"]}, headers=AUTH)
        assert changed.status_code == 200, changed.json
        wait_until(lambda: len(attempts(client, hook)) == 2, timeout=10, what="the retry's failure")
        assert client.delete("/plants/1", headers=AUTH).status_code == 204
        deliveries = receiver.wait_for(3, timeout=15)
        assert [(d.event["type"], d.event["data"]["id"]) for d in deliveries] == [
            ("plant.created", 1),
            ("plant.created", 1),
            ("plant.deleted", 1),
        ]
        wait_until(lambda: endpoint(client, hook)["next_attempt"] is None, what="no retry pending")
    finally:
        receiver.stop()


def test_dropping_another_type_keeps_the_held_events_retry_on_its_schedule(client):
    """The held event's retry is 86 s away (a 503's Retry-After, at the schedule's longest at
    this scale) when the endpoint stops listing another type: its type is still listed, so it
    waits for its retry, and the events behind it wait in order, rather than going at once."""
    receiver = creates_wait_an_hour()
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        pending = wait_until(lambda: endpoint(client, hook)["next_attempt"], what="a retry pending")
        changed = client.patch(
            f"/webhooks/{hook['id']}", json={"events": ["plant.created", "plant.updated"]}, headers=AUTH
        )
        assert changed.status_code == 200, changed.json
        assert changed.json["events"] == ["plant.created", "plant.updated"]
        assert changed.json["next_attempt"] == pending
        assert client.put("/plants/1", json={"name": "Fern 1", "tag": "x"}, headers=AUTH).status_code == 200
        time.sleep(1.0)
        assert [delivery.event["type"] for delivery in receiver.deliveries] == ["plant.created"]
        assert endpoint(client, hook)["next_attempt"] == pending
        assert len(attempts(client, hook)) == 1
    finally:
        receiver.stop()


def test_the_deliverers_help_prints_its_usage_and_settings():
    """`plant-store-webhooks --help` needs no setting: it says what the command does and reads."""
    script = Path(sys.executable).parent / "plant-store-webhooks"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANTS_")}
    done = subprocess.run([script, "--help"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: plant-store-webhooks")
    for name in ("PLANTS_STORE_URL", "PLANTS_WEBHOOKS_TIMEOUT", "PLANTS_LOG_FORMAT"):
        assert name in done.stdout
    assert done.stderr == ""
    wrong = subprocess.run([script, "--bogus"], env=env, capture_output=True, text=True, timeout=30)
    assert wrong.returncode == 2
    assert "unrecognized arguments: --bogus" in wrong.stderr


@pytest.mark.parametrize("store_settings", ["memory", "redis"], indirect=True)
def test_an_attempt_that_fails_while_the_deliverer_stops_is_recorded_and_waits_its_retry(make_app):
    """Only an attempt the stop cuts off goes unrecorded: one that times out by itself while the
    deliverer stops (without cutting off, as the app's close and the deliverer on its own stop)
    is the receiver's failure, recorded and retried on the schedule, not at once."""
    service = make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_TIMEOUT=1.0)
    client = service.test_client()
    receiver = Receiver(lambda delivery, number: (204, {}, 3.0))
    try:
        hook = register(client, receiver.url)
        create(client, 1)
        receiver.wait_for(1)
        service.extensions["plants"].deliverer.stop(timeout=5.0)
        recorded = attempts(client, hook)
        assert [(attempt["status"], attempt["error"]) for attempt in recorded] == [(None, "timeout")]
        assert endpoint(client, hook)["next_attempt"] is not None
    finally:
        receiver.stop()


@pytest.mark.parametrize("store_settings", ["memory", "redis"], indirect=True)
def test_a_new_url_does_not_wait_for_the_old_urls_attempt_under_way(client):
    """The old URL's receiver holds its answer for longer than the test waits: the event still
    goes to the new URL at once, not once that attempt ends (it held the endpoint's lease)."""
    hold_s = 12.0
    old = Receiver(lambda delivery, number: (204, {}, hold_s))
    new = Receiver()
    try:
        hook = register(client, old.url)
        create(client, 1)
        old.wait_for(1, timeout=10)
        changed = client.patch(f"/webhooks/{hook['id']}", json={"url": new.url}, headers=AUTH)
        assert changed.status_code == 200, changed.json
        changed_at = time.monotonic()
        (delivery,) = new.wait_for(1, timeout=hold_s / 2)
        assert delivery.at - changed_at < hold_s / 2
        assert (delivery.id, delivery.event["data"]["id"]) == (old.deliveries[0].id, 1)
        # The next event follows it there, and nothing of the old URL's attempt is recorded.
        create(client, 2)
        assert [d.event["data"]["id"] for d in new.wait_for(2, timeout=hold_s / 2)] == [1, 2]
        # The second attempt is recorded once its answer came, after the receiver counted it.
        recorded = wait_until(lambda: len(attempts(client, hook)) >= 2 and attempts(client, hook))
        assert [a["status"] for a in recorded] == [204, 204]
    finally:
        old.stop()
        new.stop()
