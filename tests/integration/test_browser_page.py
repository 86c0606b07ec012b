"""The docs' browser page (docs/browser/index.html) in real headless Chromium, served from another
origin than the service: it lists plants, creates one and watches the feed with EventSource and a
watch ticket, through CORS, directly and behind the shipped nginx configuration, across the end of
its stream and its ticket's expiry."""

from __future__ import annotations

import http.client
import json
import signal
import time

import pytest
from selenium.webdriver.common.by import By

from tests.chromium import start_chromium, wait
from tests.helpers import call, static_origin
from tests.servers import ROOT, TOKEN, Gunicorn, Nginx

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def page_origin():
    """docs/browser served as static files by Python's own server, on its own port: another origin."""
    with static_origin(ROOT / "docs" / "browser") as origin:
        yield origin


@pytest.fixture(scope="module")
def service(page_origin, tmp_path_factory):
    app = Gunicorn(
        env={
            "PLANTS_CORS_ORIGINS": page_origin,
            "PLANTS_TRUSTED_PROXIES": "1",
            "GUNICORN_THREADS": "2",
            # short, so that the page's stream ends and its ticket expires within the test
            "PLANTS_EVENTS_STREAM_MAX": "2",
            "PLANTS_WATCH_TICKET_TTL": "3",
        }
    )
    proxy = Nginx(app.port, tmp_path_factory.mktemp("nginx-browser-page"))
    yield app, proxy
    proxy.stop()
    app.stop()


@pytest.fixture
def chromium(monkeypatch):
    driver = start_chromium(monkeypatch)
    yield driver
    driver.quit()


def connection(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=15)


def create(port: int, plant_id: int, name: str) -> None:
    status, _, body = call(connection(port), "POST", "/plants", {"id": plant_id, "name": name}, AUTH)
    assert status == 200, body


def shown(driver, css: str, timeout: float = 15):
    return wait(driver, timeout).until(lambda _: driver.find_elements(By.CSS_SELECTOR, css))


def open_page(driver, page_origin: str, port: int, token: str) -> None:
    """Open the page, give it the service's URL and a token, and press Connect."""
    driver.get(f"{page_origin}/index.html")
    api = driver.find_element(By.ID, "api")
    api.clear()
    api.send_keys(f"http://127.0.0.1:{port}")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "connect-button").click()


def connect_page(driver, page_origin: str, port: int, token: str) -> None:
    """Open the page, connect it, and wait until it watches the feed."""
    open_page(driver, page_origin, port, token)
    wait(driver, 20).until(lambda d: d.find_element(By.ID, "status").text == "watching")


@pytest.mark.parametrize("through", ["direct", "nginx"])
def test_the_docs_page_lists_creates_and_watches_from_another_origin(page_origin, service, chromium, through):
    app, proxy = service
    port = app.port if through == "direct" else proxy.port
    base = 740_000 if through == "direct" else 750_000
    create(app.port, base, "Listed fern")

    connect_page(chromium, page_origin, port, TOKEN)
    shown(chromium, f'#plants li[data-id="{base}"]')

    # a plant created by the page arrives on its own feed, and in its list
    chromium.find_element(By.ID, "plant-id").send_keys(str(base + 1))
    chromium.find_element(By.ID, "plant-name").send_keys("Page fern")
    chromium.find_element(By.ID, "create-button").click()
    (event,) = shown(chromium, f'#events li[data-type="plant.created"][data-id="{base + 1}"]')
    assert "Page fern" in event.text
    shown(chromium, f'#plants li[data-id="{base + 1}"]')
    assert "Created Page fern." in chromium.find_element(By.ID, "message").text

    # so does a change anyone else makes
    status, _, _ = call(connection(app.port), "DELETE", f"/plants/{base}", None, AUTH)
    assert status == 204
    shown(chromium, f'#events li[data-type="plant.deleted"][data-id="{base}"]')

    # and still after its stream ended and its ticket expired: the page mints another
    time.sleep(6)
    create(app.port, base + 2, "Later fern")
    shown(chromium, f'#events li[data-type="plant.created"][data-id="{base + 2}"]')

    logged = [entry["message"] for entry in chromium.get_log("browser")]
    assert not [line for line in logged if "CORS" in line or "Access-Control" in line], logged
    status, _, body = call(connection(app.port), "GET", f"/plants/{base + 1}", None, AUTH)
    assert (status, json.loads(body)) == (200, {"name": "Page fern"})


PAGE_TOKEN = "page-token"


@pytest.fixture(scope="module")
def limited_service(page_origin):
    """The page's token limited to 4 requests a second; the writer's token unlimited."""
    app = Gunicorn(
        env={"PLANTS_CORS_ORIGINS": page_origin, "PLANTS_API_TOKENS": f"{TOKEN},{PAGE_TOKEN}@4/second"}
    )
    yield app
    app.stop()


def test_the_docs_page_keeps_its_list_through_a_burst_of_changes_under_a_rate_limit(
    page_origin, limited_service, chromium
):
    """Each event is applied to the page's list: a burst of changes costs the page no request, so
    its token's rate limit cannot leave the list stale. Names are shown as text, never as markup."""
    port = limited_service.port
    connect_page(chromium, page_origin, port, PAGE_TOKEN)
    time.sleep(1.1)  # the connection's requests' window is over

    base = 760_000
    names = {base + n: f"<img src=x onerror=document.title='pwned{n}'> fern {n}" for n in range(12)}
    for plant_id, name in names.items():
        create(port, plant_id, name)
    status, _, _ = call(connection(port), "DELETE", f"/plants/{base}", None, AUTH)
    assert status == 204
    shown(chromium, f'#events li[data-type="plant.deleted"][data-id="{base}"]')

    listed = wait(chromium, 15).until(
        lambda d: (items := d.find_elements(By.CSS_SELECTOR, "#plants li")) and len(items) == 11 and items
    )
    assert [item.text for item in listed] == [
        f"{plant_id}: {names[plant_id]}" for plant_id in sorted(names)[1:]
    ]
    assert chromium.find_elements(By.CSS_SELECTOR, "#plants img, #events img") == []
    assert "pwned" not in chromium.title
    assert chromium.find_element(By.ID, "message").text == ""


def test_connecting_again_while_the_page_reconnects_leaves_one_source(page_origin, service, chromium):
    """Connect pressed while the page waits to reconnect (its ticket refused) replaces the watch:
    the reconnection it was waiting for is dropped, so each change is shown once."""
    app, _ = service
    connect_page(chromium, page_origin, app.port, TOKEN)
    # The stream ends (2 s), its reconnection's ticket has expired (3 s): the page waits 1 s.
    wait(chromium, 20).until(lambda d: d.find_element(By.ID, "status").text == "reconnecting")
    chromium.find_element(By.ID, "connect-button").click()
    wait(chromium, 20).until(lambda d: d.find_element(By.ID, "status").text == "watching")
    time.sleep(1.5)  # past the second the abandoned reconnection would have waited

    create(app.port, 770_000, "Once fern")
    shown(chromium, '#events li[data-id="770000"]')
    time.sleep(2)
    assert len(chromium.find_elements(By.CSS_SELECTOR, '#events li[data-id="770000"]')) == 1


def test_the_page_keeps_watching_after_its_token_is_rate_limited_for_a_while(page_origin, chromium):
    """A reconnection refused with 429 (the page's token past its limit), and the mint of its next
    ticket refused too, is not the end of the watch: the page waits as Retry-After says and goes
    on, so a change made once the limit allows it again is shown."""
    app = Gunicorn(
        env={
            "PLANTS_CORS_ORIGINS": page_origin,
            "PLANTS_API_TOKENS": f"{TOKEN},{PAGE_TOKEN}@5/10second",
            "PLANTS_EVENTS_STREAM_MAX": "2",  # the stream ends: the page reconnects within the hog
        }
    )
    try:
        connect_page(chromium, page_origin, app.port, PAGE_TOKEN)
        # Another client spends the page's token's every request for 9 s: the page's reconnection
        # (3 s after its stream's end, at 2 s) and its mint of a new ticket are both 429.
        refused, until = 0, time.monotonic() + 9
        while time.monotonic() < until:
            status, _, _ = call(
                connection(app.port), "GET", "/plants/1", None, {"Authorization": f"Bearer {PAGE_TOKEN}"}
            )
            refused += status == 429
            time.sleep(0.05)
        assert refused
        wait(chromium, 10).until(lambda d: "429" in d.find_element(By.ID, "message").text)

        create(app.port, 780_000, "Patient fern")
        shown(chromium, '#events li[data-id="780000"]', timeout=30)
        shown(chromium, '#plants li[data-id="780000"]')
    finally:
        app.stop()


def test_a_page_past_its_tokens_watcher_cap_backs_off_and_watches_once_one_closes(page_origin, chromium):
    """Its source refused (429 past PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN, which EventSource cannot
    read) while its mints succeed, the page waits longer after each refused source instead of a
    mint and a refused source every second, and watches once the token's other watch ends."""
    app = Gunicorn(env={"PLANTS_CORS_ORIGINS": page_origin, "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "1"})
    held = connection(app.port)
    try:
        held.request("GET", "/events?after=now", headers={**AUTH, "Accept": "text/event-stream"})
        stream = held.getresponse()  # kept: the token's one watch
        assert stream.status == 200
        open_page(chromium, page_origin, app.port, TOKEN)
        wait(chromium, 20).until(lambda d: d.find_element(By.ID, "status").text == "reconnecting")
        time.sleep(10)
        mints = app.output().count('"POST /events/tickets HTTP/1.1" 200')
        assert mints <= 5, mints  # 1, 2, 4 s apart: not one a second (about 10)

        stream.close()  # the token's other watch ends
        held.close()
        wait(chromium, 40).until(lambda d: d.find_element(By.ID, "status").text == "watching")
        create(app.port, 790_000, "Waiting fern")
        shown(chromium, '#events li[data-id="790000"]')
    finally:
        held.close()
        app.stop()


def short_memory_service(origin: str) -> Gunicorn:
    """A service whose feed keeps 10 events, whose token holds one watch at once, and whose
    tickets expire in 3 s (a page's stream ends within the test)."""
    return Gunicorn(
        env={
            "PLANTS_CORS_ORIGINS": origin,
            "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "1",
            "PLANTS_EVENTS_RETAIN": "10",
            "PLANTS_WATCH_TICKET_TTL": "3",
        }
    )


def hold_the_tokens_one_watch(port: int) -> http.client.HTTPConnection:
    """A stream of the token's, once its cap (1) lets one open: the page's stream has ended."""
    deadline = time.monotonic() + 20
    while True:
        held = connection(port)
        held.request("GET", "/events?after=now", headers={**AUTH, "Accept": "text/event-stream"})
        stream = held.getresponse()
        if stream.status == 200:
            return held
        stream.read()
        held.close()
        assert time.monotonic() < deadline, "the page's stream did not end"
        time.sleep(0.05)


def test_a_page_away_longer_than_the_feed_keeps_lists_the_plants_again(page_origin, chromium):
    """Its sources refused (past its token's watcher cap here; a laptop asleep alike) while more
    events were written than the feed keeps, the page's position is a 410, which EventSource
    cannot read: it was refused at every reconnection and its list stale for good. It asks the
    feed before each new source, lists the plants again, and watches on."""
    app = short_memory_service(page_origin)
    held = None
    try:
        connect_page(chromium, page_origin, app.port, TOKEN)
        held = hold_the_tokens_one_watch(app.port)
        wait(chromium, 20).until(lambda d: d.find_element(By.ID, "status").text == "reconnecting")
        for plant_id in range(791_000, 791_020):  # twice what the feed keeps
            create(app.port, plant_id, "Written while away")
        held.close()  # the page's next source may open, from a position no longer kept
        shown(chromium, '#plants li[data-id="791019"]', timeout=60)
        wait(chromium, 20).until(lambda d: d.find_element(By.ID, "status").text == "watching")
        create(app.port, 791_100, "Watched again")
        shown(chromium, '#plants li[data-id="791100"]')
    finally:
        if held is not None:
            held.close()
        app.stop()


def test_a_page_whose_token_is_withdrawn_says_it_is_not_connected(page_origin, chromium, tmp_path):
    """The page's token removed (the tokens file rewritten, SIGHUP), its next mint is a 401: the
    page says it is not connected, with the refusal, and does not try again as for a 429."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n{PAGE_TOKEN}\n", "utf-8")
    app = Gunicorn(
        env={
            "PLANTS_CORS_ORIGINS": page_origin,
            "PLANTS_API_TOKENS": "",
            "PLANTS_API_TOKENS_FILE": str(tokens),
            "PLANTS_EVENTS_STREAM_MAX": "2",
        }
    )
    try:
        connect_page(chromium, page_origin, app.port, PAGE_TOKEN)
        tokens.write_text(f"{TOKEN}\n", "utf-8")
        app.process.send_signal(signal.SIGHUP)
        wait(chromium, 30).until(lambda d: d.find_element(By.ID, "status").text == "not connected")
        assert chromium.find_element(By.ID, "message").text.startswith("401: ")
    finally:
        app.stop()
