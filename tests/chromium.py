"""Debian's headless chromium, driven by selenium through chromedriver: nothing is downloaded."""

from __future__ import annotations

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

#: Headless, and quiet: no sandbox (root in CI), no GPU, no background requests of its own.
ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
)


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
