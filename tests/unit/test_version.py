"""One version: the package's metadata, the served document's `info.version`, the shipped
openapi.yaml, the webhooks' `User-Agent` (and the one the docs show) and the README's newest
interface are app/telemetry/version.py's."""

from __future__ import annotations

import configparser
import re
from importlib import metadata
from pathlib import Path

import yaml

from app.telemetry.version import VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_setup_cfg_reads_the_version_from_the_package():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["metadata"]["version"] == "attr: app.telemetry.version.VERSION"


def test_the_installed_metadata_has_it():
    # An editable install made before the version moved keeps its old metadata: reinstall (-e .).
    assert metadata.version("plant-store") == VERSION


def test_the_document_and_the_shipped_yaml_have_it():
    from app import create_app

    served = create_app({"PLANTS_API_TOKENS": "t"}).test_client().get("/openapi.json").json
    assert served["info"]["version"] == VERSION
    shipped = yaml.safe_load((ROOT / "app/plants/openapi.yaml").read_text("utf-8"))
    assert shipped["info"]["version"] == VERSION


def test_the_webhooks_user_agent_has_it():
    from app.webhooks import user_agent

    assert user_agent() == f"plant-store/{VERSION}"


def test_the_readme_names_it_as_the_newest_interface():
    intro = (ROOT / "README.md").read_text("utf-8").split("\n## ", 1)[0]
    named = re.findall(r"(?:[Ii]nterface|version) (\d+\.\d+\.\d+)", intro)
    assert max(named, key=lambda v: tuple(map(int, v.split(".")))) == VERSION
    assert f"This is version {VERSION}" in intro


def test_every_user_agent_the_docs_show_has_it():
    shown = [
        (path.name, agent)
        for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
        for agent in re.findall(r"plant-store/(\d+\.\d+\.\d+)", path.read_text("utf-8"))
    ]
    assert shown  # docs/webhooks.md shows a delivery's headers
    assert [(name, agent) for name, agent in shown if agent != VERSION] == []
