"""`Transfer-Encoding` and `Expect` refused as the packaged worker's parser refuses them, on every
path, whichever server hands the request on (gunicorn's gthread, `flask run`): the standalone app's
check, made by its outermost middleware (request_target.py), so /healthz and an unknown path are
refused too, not only the plants blueprint's routes (whose guard keeps its own check for a host
that embeds it).

- A transfer coding in an HTTP/1.0 request, or one whose last coding is not `chunked`, leaves the
  body's length unknown: 400 (RFC 9112 sections 6.1 and 6.3). Any coding besides `chunked` is the
  501 of app/http/body.py. The packaged worker decodes `chunked` and hands on no field; gunicorn's
  gthread takes gzip, deflate and compress before it; Werkzeug's development server decodes only a
  field that is `chunked` alone, and served the rest as if the body were none.
- An expectation other than `100-continue` is the 417 RFC 9110 section 10.1.1 allows: gunicorn
  27's parser answers it so before the app, where the packaged worker and `flask run` served it.
"""

from __future__ import annotations

from typing import Any

from app.http.body import transfer_coded

EXPECTATION_FAILED = "417 EXPECTATION FAILED"
BAD_REQUEST = "400 BAD REQUEST"


def refusal(environ: dict[str, Any]) -> tuple[str, str] | None:
    """The status and message of a head these fields make unservable; None for any other."""
    transfer = environ.get("HTTP_TRANSFER_ENCODING")
    if transfer is not None:
        codings = [coding.strip().lower() for coding in transfer.split(",") if coding.strip()]
        if environ.get("SERVER_PROTOCOL") == "HTTP/1.0":
            return (
                BAD_REQUEST,
                "The request's framing is malformed: Transfer-Encoding in an HTTP/1.0 request.",
            )
        if not codings or codings[-1] != "chunked":
            return BAD_REQUEST, (
                "The request's framing is malformed: its body's length is unknown when the last"
                " transfer coding is not chunked (RFC 9112 section 6.3)."
            )
        coded = transfer_coded(environ)
        if coded is not None:
            return f"{coded.code} NOT IMPLEMENTED", coded.description or ""
    expect = environ.get("HTTP_EXPECT")
    if expect is not None and any(
        member.strip().lower() not in ("", "100-continue") for member in expect.split(",")
    ):
        return EXPECTATION_FAILED, "The only expectation served is 100-continue (RFC 9110 section 10.1.1)."
    return None
