"""The rule both logs follow for a URL's query (app/telemetry/redact.py, deploy/nginx-plants.conf):
the value of a parameter the service does not define is never written; the service's own stay
readable. Here the rule itself, and that the service and the nginx site name the same parameters;
tests/integration/test_watch_tickets.py runs both logs."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pytest

from app.schemas.parameters import EventsQuerySchema, PageQuerySchema
from app.telemetry.logs import TicketFilter
from app.telemetry.redact import (
    READABLE,
    holds_secret,
    query_holds_secret,
    scrub,
    scrub_query,
    scrub_uri,
    uri_holds_secret,
)

NGINX_SITE = Path(__file__).parents[2] / "deploy" / "nginx-plants.conf"


def test_the_readable_parameters_are_the_services_own_but_the_ticket():
    defined = set(PageQuerySchema().fields) | set(EventsQuerySchema().fields)
    assert set(READABLE) == defined - {"ticket"}


def test_the_nginx_site_reads_the_same_parameters():
    """Its map names them twice (a readable prefix, then the first parameter that is not)."""
    lines = [line for line in NGINX_SITE.read_text().splitlines() if "plants_logged_query" in line]
    [entry] = [line for line in lines if line.lstrip().startswith('"~')]
    alternations = re.findall(r"\(([a-z|]+)\)", entry)
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
        ("after&x=s3cret", "after&x=[redacted]"),  # the service's own name, without a value
        ("wait=1&ticket=plwt_s3cret&tags=a", "wait=1&ticket=plwt_[redacted]&tags=a"),
    ],
)
def test_a_parameter_the_service_does_not_define_has_its_value_redacted(query, logged):
    assert query_holds_secret(query)
    assert scrub_query(query) == logged
    assert scrub(f'"GET /plants?{query} HTTP/1.1" 400') == f'"GET /plants?{logged} HTTP/1.1" 400'


@pytest.mark.parametrize(
    "query", ["", "limit=5&after=abc&tags=a&tags=b", "after", "wait=1&snapshot=true", "&&", "after&;limit=&"]
)
def test_the_services_own_parameters_stay_readable(query):
    assert not query_holds_secret(query)
    assert not holds_secret(f"Error handling request /events?{query}")
    assert scrub_query(query) == query


@pytest.mark.parametrize(
    ("query", "logged"),
    [
        ("s3cr3t", "[redacted]"),
        ("after=now&s3cr3t", "after=now&[redacted]"),
        ("s3cr3t&limit=5", "[redacted]&limit=5"),
        ("wait=1;s3cr3t&&tags=a", "wait=1;[redacted]&&tags=a"),
        ("s3cr3t=", "[redacted]"),  # as a client's URLSearchParams writes a name without a value
        ("after=&s3cr3t=&limit=", "after=&[redacted]&limit="),
        ("%61fter", "[redacted]"),  # not a name the service reads, encoded
        ("After", "[redacted]"),
        ("s3cr3t%3Dabc", "[redacted]"),  # an encoded `=` separates nothing
        ("s3cr3t?limit=5", "[redacted]?limit=5"),  # a URL with a query given another
        ("limit=5?s3cr3t", "limit=5?[redacted]"),
        ("after=now?s3cr3t=x", "after=now?s3cr3t=[redacted]"),
        ("s3cr3t?token=5&after=now", "[redacted]?token=[redacted]&after=now"),
        ("s3cr3t?ticket=plwt_x", "[redacted]?ticket=plwt_[redacted]"),
        ("access_token", "[redacted]"),
    ],
)
def test_a_name_the_service_does_not_define_is_redacted_without_a_value_too(query, logged):
    """A client may send its token as a bare word (`?s3cr3t`): a name may be the secret."""
    assert query_holds_secret(query)
    assert scrub_query(query) == logged
    assert scrub_uri(f"/plants?{query}#top") == f"/plants?{logged}#[redacted]"
    assert holds_secret(f"Error handling request /plants?{query}")
    assert scrub(f'"GET /plants?{query} HTTP/1.1" 400') == f'"GET /plants?{logged} HTTP/1.1" 400'
    assert scrub(f"at http://host/plants?{query} then") == f"at http://host/plants?{logged} then"


@pytest.mark.parametrize(
    "text", ["Is Redis running?", "Is Redis running?)", "what?now", "(a?b) and ?x", "ids?tags&after"]
)
def test_a_question_mark_in_a_sentence_is_no_query_of_bare_names(text):
    """In free text a bare word counts only in a URL's query (a word with a `/` before its `?`):
    a message's question is written as it is."""
    assert not holds_secret(text)
    assert scrub(text) == text


def test_a_bare_word_in_an_error_line_is_redacted():
    """gunicorn's error lines name a failed request's URI, query and all; so may an exception."""
    try:
        raise RuntimeError("while serving /plants?after&s3cret-value")
    except RuntimeError:
        record = logging.LogRecord(
            "gunicorn.error",
            logging.ERROR,
            __file__,
            1,
            "Error handling %s",
            ("/plants?s3cret-value",),
            sys.exc_info(),
        )
    assert TicketFilter().filter(record)
    assert record.getMessage() == "Error handling /plants?[redacted]"
    assert "s3cret" not in str(record.exc_text)
    assert "/plants?after&[redacted]" in str(record.exc_text)


def test_a_parameter_named_in_a_sentence_keeps_its_name():
    """Outside a URL only a value is redacted, as before bare words were: a message that names a
    parameter (`remove ?db=`) still says which."""
    assert (
        scrub("a cluster has only database 0: remove ?db=")
        == "a cluster has only database 0: remove ?db=[redacted]"
    )


def test_a_long_query_is_redacted_to_its_end():
    """A request line may take 8 KiB: the name after a thousand readable parameters is redacted."""
    readable = "&".join(["tags=fern"] * 1000)
    assert scrub_query(f"{readable}&s3cr3t") == f"{readable}&[redacted]"
    assert scrub(f"request /plants?{readable};s3cr3t") == f"request /plants?{readable};[redacted]"


@pytest.mark.parametrize(
    ("target", "query", "logged"),
    [
        ('/plants?a"&token=s3cret', 'a"&token=s3cret', "/plants?[redacted]&token=[redacted]"),
        ('/plants?token=ab"s3cret', 'token=ab"s3cret', "/plants?token=[redacted]"),
        ("/plants?limit=1#token=s3cret", "limit=1", "/plants?limit=1#[redacted]"),
        ("/healthz#s3cret", "", "/healthz#[redacted]"),
        ("http://host/plants?x=s3cret", "x=s3cret", "http://host/plants?x=[redacted]"),
    ],
)
def test_a_request_target_is_redacted_whatever_its_query_holds(target, query, logged):
    """A `"` ends a URL in free text, not in a request's target; a fragment is never the query."""
    assert uri_holds_secret(target, query)
    assert scrub_uri(target) == logged


@pytest.mark.parametrize(
    "target", ["/plants", "/plants?limit=5&after=abc", "/healthz?after", "/plants?", "/plants?&;"]
)
def test_a_target_without_a_secret_is_written_as_sent(target):
    assert not uri_holds_secret(target, target.partition("?")[2].partition("#")[0])
    assert scrub_uri(target) == target


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        # Werkzeug's development server, a 4xx in its colours.
        (
            '127.0.0.1 - - [02/Dec/2026 16:05:01] "\x1b[31m\x1b[1mGET /events?ticket=plwt_abc-1&wait=5'
            ' HTTP/1.1\x1b[0m" 401 -',
            '127.0.0.1 - - [02/Dec/2026 16:05:01] "\x1b[31m\x1b[1mGET /events?ticket=plwt_[redacted]&wait=5'
            ' HTTP/1.1\x1b[0m" 401 -',
        ),
        # A fragment, and a quote in a query, are the target's, as the access log reads them.
        ('"GET /plants#s3cret HTTP/1.1" 401 -', '"GET /plants#[redacted] HTTP/1.1" 401 -'),
        ('"GET /plants?token=a"s3cret HTTP/1.1" 400 -', '"GET /plants?token=[redacted] HTTP/1.1" 400 -'),
        # A request line Werkzeug could not read, named in its error line.
        (
            "code 400, message Bad request syntax ('GET /events?ticket=plwt_abc HTTP/1.1 x')",
            "code 400, message Bad request syntax ('GET /events?ticket=plwt_[redacted] HTTP/1.1 x')",
        ),
    ],
)
def test_a_request_line_in_a_log_line_is_redacted_as_the_access_log_does(line, shown):
    record = logging.LogRecord("werkzeug", logging.INFO, __file__, 1, "%s", (line,), None)
    assert TicketFilter().filter(record)
    assert record.getMessage() == shown


def test_a_line_read_by_two_filters_is_redacted_once():
    """Werkzeug's logger's filter, then a root handler's (a host that configured both)."""
    line = '"GET /events?after=now&ticket=plwt_abc-1&token=x HTTP/1.1" 200 -'
    once = '"GET /events?after=now&ticket=plwt_[redacted]&token=[redacted] HTTP/1.1" 200 -'
    for _ in range(2):
        record = logging.LogRecord("werkzeug", logging.INFO, __file__, 1, "%s", (line,), None)
        assert TicketFilter().filter(record)
        line = record.getMessage()
        assert line == once
