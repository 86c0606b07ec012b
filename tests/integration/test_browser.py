"""The API page in a real browser: Debian's headless chromium, driven by selenium through chromedriver.

Nothing is downloaded: selenium is pointed at /usr/bin/chromium and /usr/bin/chromedriver.
"""

from __future__ import annotations

import json
import os

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec

from tests.chromium import start_chromium, wait
from tests.helpers import assert_error, call
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server():
    server = Gunicorn()
    yield server
    server.stop()


@pytest.fixture
def browser(monkeypatch):
    driver = start_chromium(monkeypatch, "--window-size=1280,1600")
    yield driver
    driver.quit()


def visible(driver, css: str, timeout: float = 20):
    return wait(driver, timeout).until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))


def try_it_out(block):
    """Open an operation and press its "Try it out": the page opens every operation read-only,
    so the button reads "Try it out", never "Cancel"."""
    summary = block.find_element(By.CSS_SELECTOR, ".opblock-summary")
    # In the middle of the window: below the document's description, a click may land elsewhere.
    block.parent.execute_script("arguments[0].scrollIntoView({block: 'center'})", summary)
    summary.click()
    button = wait(block.parent, 20).until(
        lambda _: block.find_element(By.CSS_SELECTOR, "button.try-out__btn")
    )
    assert button.text.strip() == "Try it out"
    button.click()
    return wait(block.parent, 20).until(lambda _: block.find_element(By.CSS_SELECTOR, "button.execute"))


def get_operation(browser, path: str):
    """The page's block of the GET operation on `path`."""
    return next(
        block
        for block in browser.find_elements(By.CSS_SELECTOR, ".opblock-get")
        if block.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path") == path
    )


def test_the_page_authorizes_creates_and_lists_plants(server, browser, tmp_path):
    browser.get(f"http://127.0.0.1:{server.port}/docs")
    operation = visible(browser, ".opblock-post")
    assert (
        operation.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path")
        == "/plants"
    )

    visible(browser, ".auth-wrapper button.authorize").click()
    visible(browser, ".modal-ux input").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, ".modal-ux .auth-btn-wrapper button.authorize").click()
    visible(browser, ".modal-ux button.btn-done").click()

    try_it_out(operation)
    body = visible(browser, ".opblock-post textarea.body-param__text")
    body.clear()
    body.send_keys(json.dumps({"id": 424242, "name": "Browser fern", "tag": "fern"}))
    visible(browser, ".opblock-post button.execute").click()

    status = visible(browser, ".live-responses-table .response .response-col_status")
    assert status.text.strip() == "200"
    shown = browser.find_element(By.CSS_SELECTOR, ".live-responses-table .response .microlight").text
    assert json.loads(shown) == {"name": "Browser fern", "tag": "fern"}

    # The page lists plants too: GET /plants, tried with its defaults, shows the plant just made.
    # Its tags filter starts empty: Execute lists every plant.
    listing = get_operation(browser, "/plants")
    execute = try_it_out(listing)
    tags = listing.find_elements(By.CSS_SELECTOR, 'tr[data-param-name="tags"] input')
    assert [field.get_attribute("value") for field in tags] in ([], [""])
    execute.click()
    listed = wait(browser, 20).until(
        lambda _: listing.find_element(
            By.CSS_SELECTOR, ".live-responses-table .response .response-col_status"
        )
    )
    assert listed.text.strip() == "200"
    page = json.loads(
        listing.find_element(By.CSS_SELECTOR, ".live-responses-table .response .microlight").text
    )
    assert {"id": 424242, "name": "Browser fern", "tag": "fern"} in page["plants"]

    # The page edits a plant too: PUT /plants/{id}, tried with the id and a new body.
    replace = visible(browser, ".opblock-put")
    try_it_out(replace)
    id_input = wait(browser, 20).until(
        lambda _: replace.find_element(By.CSS_SELECTOR, 'tr[data-param-name="id"] input')
    )
    id_input.clear()
    id_input.send_keys("424242")
    edit = replace.find_element(By.CSS_SELECTOR, "textarea.body-param__text")
    edit.send_keys(Keys.CONTROL, "a")  # the page's example body, replaced whole
    edit.send_keys(Keys.DELETE)
    edit.send_keys(json.dumps({"name": "Edited fern", "tag": "fern"}))
    replace.find_element(By.CSS_SELECTOR, "button.execute").click()
    edited = wait(browser, 20).until(
        lambda _: replace.find_element(
            By.CSS_SELECTOR, ".live-responses-table .response .response-col_status"
        )
    )
    shown = replace.find_element(By.CSS_SELECTOR, ".live-responses-table .response .microlight").text
    assert edited.text.strip() == "200", shown
    status, _, body = call(server.connection(), "GET", "/plants/424242", None, AUTH)
    assert (status, json.loads(body)) == (200, {"name": "Edited fern", "tag": "fern"})

    # The page follows the change feed too: GET /events, tried with its defaults, shows the
    # creation and the edit just made.
    feed = get_operation(browser, "/events")
    try_it_out(feed).click()
    followed = wait(browser, 20).until(
        lambda _: feed.find_element(By.CSS_SELECTOR, ".live-responses-table .response .response-col_status")
    )
    assert followed.text.strip() == "200"
    events = json.loads(
        feed.find_element(By.CSS_SELECTOR, ".live-responses-table .response .microlight").text
    )
    mine = [(e["type"], e["plant"]["name"]) for e in events["events"] if e["plant"]["id"] == 424242]
    assert mine == [("plant.created", "Browser fern"), ("plant.updated", "Edited fern")]

    screenshot = tmp_path / "api-page.png"
    browser.execute_script("arguments[0].scrollIntoView()", listing)
    browser.save_screenshot(str(screenshot))
    print(f"screenshot of the API page: {screenshot}")

    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    # The page's writes reached the store: the same id with another name conflicts.
    assert_error(*call(server.connection(), "POST", "/plants", {"id": 424242, "name": "Other"}, AUTH), 409)
    assert os.path.getsize(screenshot) > 10_000


def test_the_page_authorizes_with_a_pasted_jwt_access_token(browser):
    from tests.issuer import AUDIENCE, Issuer

    issuer = Issuer()
    server = Gunicorn(env={"PLANTS_JWT_ISSUER": issuer.url, "PLANTS_JWT_AUDIENCE": AUDIENCE})
    try:
        browser.get(f"http://127.0.0.1:{server.port}/docs")
        operation = visible(browser, ".opblock-post")
        visible(browser, ".auth-wrapper button.authorize").click()
        # The bearer scheme's box, beside the provider's OpenID Connect scheme.
        bearer_box = next(
            box
            for box in browser.find_elements(By.CSS_SELECTOR, ".modal-ux .auth-container")
            if "bearerAuth" in box.text
        )
        bearer_box.find_element(By.CSS_SELECTOR, "input").send_keys(issuer.token())
        bearer_box.find_element(By.CSS_SELECTOR, "button.authorize").click()
        visible(browser, ".modal-ux button.btn-done").click()

        try_it_out(operation)
        body = visible(browser, ".opblock-post textarea.body-param__text")
        body.clear()
        body.send_keys(json.dumps({"id": 434343, "name": "Token fern"}))
        visible(browser, ".opblock-post button.execute").click()
        status = visible(browser, ".live-responses-table .response .response-col_status")
        assert status.text.strip() == "200"
        shown = browser.find_element(By.CSS_SELECTOR, ".live-responses-table .response .microlight").text
        assert json.loads(shown) == {"name": "Token fern"}
        # The page read the provider's discovery document (allowed by its policy): no error.
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []
        assert issuer.fetches["discovery"] >= 2  # the worker's load, the page (the master fetches none)
        assert_error(
            *call(server.connection(), "POST", "/plants", {"id": 434343, "name": "Other"}, AUTH), 409
        )
    finally:
        server.stop()
        issuer.stop()


def test_try_it_out_with_the_pages_defaults_succeeds_on_every_operation(browser):
    """A new user authorizes, then presses Execute on every operation in the page's order,
    changing nothing: every default the page offers is accepted (2xx). The one thing typed is
    what no default can hold: the id the service gave the webhook endpoint the page's own
    `POST /webhooks` registered (ids are random), pasted into `endpoint_id`."""
    server = Gunicorn()
    try:
        browser.get(f"http://127.0.0.1:{server.port}/docs")
        visible(browser, ".opblock")
        visible(browser, ".auth-wrapper button.authorize").click()
        visible(browser, ".modal-ux input").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, ".modal-ux .auth-btn-wrapper button.authorize").click()
        visible(browser, ".modal-ux button.btn-done").click()
        results = []
        blocks = browser.find_elements(By.CSS_SELECTOR, ".opblock")
        assert len(blocks) >= 19  # every operation, HEADs included
        for block in blocks:
            path = block.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path")
            # What the service sends (the `plantEvent` callback) is inside `POST /webhooks`'s block.
            assert path.startswith("/"), path
            fill = {}
            if "{endpoint_id}" in path:
                status, _, body = call(server.connection(), "GET", "/webhooks", None, AUTH)
                fill["endpoint_id"] = json.loads(body)["webhooks"][0]["id"]
            results.append(execute_with_defaults(browser, block, fill))
        failed = [result for result in results if not result[2].startswith("2")]
        assert failed == [], results
        # The defaults made the plant of the examples, and the page's PATCH retagged it.
        status, _, body = call(server.connection(), "GET", "/plants/1", None, AUTH)
        assert status == 200
        assert json.loads(body)["name"] == "Boston fern"
    finally:
        server.stop()


def execute_with_defaults(browser, block, fill: dict[str, str] | None = None) -> tuple[str, str, str]:
    """Open an operation, press Execute without changing anything but the parameters in `fill`:
    (method, path, status)."""
    method = block.find_element(By.CSS_SELECTOR, ".opblock-summary-method").text.strip()
    path = block.find_element(By.CSS_SELECTOR, ".opblock-summary-path").get_attribute("data-path")
    browser.execute_script("arguments[0].scrollIntoView()", block)
    execute = try_it_out(block)
    for name, value in (fill or {}).items():
        field = wait(browser, 20).until(
            lambda _, name=name: block.find_element(By.CSS_SELECTOR, f'tr[data-param-name="{name}"] input')
        )
        field.clear()
        field.send_keys(value)
    execute.click()
    status = wait(browser, 20).until(
        lambda _: block.find_element(By.CSS_SELECTOR, ".live-responses-table .response .response-col_status")
    )
    result = (method, path, status.text.strip())
    block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()  # fold it again
    return result
