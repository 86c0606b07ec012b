"""Debian's headless chromium, driven by selenium through chromedriver: nothing is downloaded."""

from __future__ import annotations

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

#: Headless, and quiet: no sandbox (root in CI), no GPU, no background requests of its own.
ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
)


#: How often a wait looks again. selenium's default, half a second, was most of a page test's time:
#: every click's wait slept a whole half second for what the page drew in milliseconds (the
#: page's 33 operations, each opened, tried and executed, took about a minute).
POLL_SECONDS = 0.1


def wait(driver: webdriver.Chrome, timeout: float) -> WebDriverWait:
    """selenium's WebDriverWait on `driver` (or an element), looking every POLL_SECONDS."""
    return WebDriverWait(driver, timeout, poll_frequency=POLL_SECONDS)


def start_chromium(monkeypatch, *arguments: str) -> webdriver.Chrome:
    """A browser whose console log (`get_log("browser")`) keeps every level."""
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium's manager must not look anything up
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in (*ARGUMENTS, *arguments):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    return driver
