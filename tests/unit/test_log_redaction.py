"""The rule both logs follow for a URL's query (app/telemetry/redact.py, deploy/nginx-plants.conf):
the value of a parameter the service does not define is never written; the service's own stay
readable. Here the rule itself, and that the service and the nginx site name the same parameters;
tests/integration/test_watch_tickets.py runs both logs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.schemas.parameters import EventsQuerySchema, PageQuerySchema
from app.telemetry.redact import READABLE, holds_secret, query_holds_secret, scrub, scrub_query

NGINX_SITE = Path(__file__).parents[2] / "deploy" / "nginx-plants.conf"


def test_the_readable_parameters_are_the_services_own_but_the_ticket():
    defined = set(PageQuerySchema().fields) | set(EventsQuerySchema().fields)
    assert set(READABLE) == defined - {"ticket"}


def test_the_nginx_site_reads_the_same_parameters():
    """Its map names them twice (a readable prefix, then the first parameter that is not)."""
    lines = [line for line in NGINX_SITE.read_text().splitlines() if "plants_logged_query" in line]
    [entry] = [line for line in lines if line.lstrip().startswith('"~')]
    alternations = re.findall(r"\(([a-z|]+)\)=", entry)
    assert len(alternations) == 2
    assert all(set(names.split("|")) == READABLE for names in alternations)


@pytest.mark.parametrize(
    ("query", "logged"),
    [
        ("token=s3cret", "token=[redacted]"),
        ("limit=5&api_key=s3cret&after=abc", "limit=5&api_key=[redacted]&after=abc"),
        ("Limit=s3cret", "Limit=[redacted]"),  # not a name the service reads
        ("%61fter=s3cret", "%61fter=[redacted]"),  # nor an encoded one
        ("after=abc;token=s3cret", "after=abc;token=[redacted]"),
        ("marker&x=s3cret", "marker&x=[redacted]"),  # a name without `=` has no value
        ("wait=1&ticket=plwt_s3cret&tags=a", "wait=1&ticket=plwt_[redacted]&tags=a"),
    ],
)
def test_a_parameter_the_service_does_not_define_has_its_value_redacted(query, logged):
    assert query_holds_secret(query)
    assert scrub_query(query) == logged
    assert scrub(f'"GET /plants?{query} HTTP/1.1" 400') == f'"GET /plants?{logged} HTTP/1.1" 400'


@pytest.mark.parametrize("query", ["", "limit=5&after=abc&tags=a&tags=b", "marker", "wait=1&snapshot=true"])
def test_the_services_own_parameters_stay_readable(query):
    assert not query_holds_secret(query)
    assert not holds_secret(f"Error handling request /events?{query}")
    assert scrub_query(query) == query
