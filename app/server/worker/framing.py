"""Where a request ends in the bytes a connection has sent: the poller's view of HTTP/1.1 framing.

The poller reads requests from non-blocking sockets and hands a request to a request thread only
once all of it is there (or once it is clear that the rest will never be read). It needs only
the framing for that: the end of the head, then `Content-Length` or the chunks of
`Transfer-Encoding: chunked` (RFC 9112 §6 and §7.1). Everything else, and every refusal, is
gunicorn's parser's, which reads the request from memory afterwards.
"""

from __future__ import annotations

from typing import NamedTuple

_HEAD_END = b"\r\n\r\n"
#: A chunk-size line (with extensions) longer than this is refused by the parser anyway.
_MAX_CHUNK_LINE = 1024


class Extent(NamedTuple):
    """What the buffered bytes hold.

    `size` is how many bytes make the next request (0: not all there yet). `close` says the
    connection must close after its answer: the request's body is not read in full (it is over
    the limit, or its framing is malformed, which the parser refuses). `head_done` says the head
    is complete, `expects_continue` that its client waits for `100 Continue` to send the body,
    and `head_too_large` that no end of the head came within the limit (431, and close).
    """

    size: int = 0
    close: bool = False
    head_done: bool = False
    expects_continue: bool = False
    head_too_large: bool = False


NEED_HEAD = Extent()


def request_extent(buffer: bytes | bytearray, max_head: int, max_body: int) -> Extent:
    """The extent of the request at the start of `buffer`; see Extent."""
    head_end = buffer.find(_HEAD_END, 0, max_head + len(_HEAD_END))
    if head_end < 0:
        if len(buffer) > max_head:
            return Extent(len(buffer), close=True, head_too_large=True)
        return NEED_HEAD
    body_start = head_end + len(_HEAD_END)
    lengths, codings, expects_continue = _framing_fields(bytes(buffer[:head_end]))
    refused = Extent(body_start, close=True, head_done=True)
    if codings:
        if lengths or codings[-1] != b"chunked":
            return refused  # the parser refuses both (RFC 9112 §6.1 and §6.3)
        return _chunked_extent(buffer, body_start, max_body, expects_continue)
    if not lengths:
        return Extent(body_start, head_done=True)
    if len(set(lengths)) != 1 or not lengths[0].isdigit():
        return refused
    length = int(lengths[0])
    if length > max_body:
        return refused  # the service answers 413 without reading it
    if len(buffer) - body_start < length:
        return Extent(head_done=True, expects_continue=expects_continue)
    return Extent(body_start + length, head_done=True)


def _framing_fields(head: bytes) -> tuple[list[bytes], list[bytes], bool]:
    """The head's Content-Length values, its transfer codings, and whether it expects 100-continue."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    expects_continue = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            lengths += [part.strip() for part in value.split(b",")]
        elif name == b"transfer-encoding":
            codings += [part.strip().lower() for part in value.split(b",") if part.strip()]
        elif name == b"expect":
            expects_continue = value.strip().lower() == b"100-continue"
    http11 = head.split(b"\r\n", 1)[0].endswith(b"HTTP/1.1")
    return lengths, codings, expects_continue and http11


def _chunked_extent(
    buffer: bytes | bytearray, position: int, max_body: int, expects_continue: bool
) -> Extent:
    body = 0
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            if len(buffer) - position > _MAX_CHUNK_LINE:
                return Extent(len(buffer), close=True, head_done=True)
            return Extent(head_done=True, expects_continue=expects_continue)
        size_field = bytes(buffer[position:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_field, 16) if size_field else -1
        except ValueError:
            size = -1
        if size < 0:
            return Extent(line_end + 2, close=True, head_done=True)  # the parser refuses it
        if size == 0:
            # The last chunk, then trailer fields up to an empty line.
            if buffer[line_end : line_end + 4] == _HEAD_END:
                return Extent(line_end + 4, head_done=True)
            trailers_end = buffer.find(_HEAD_END, line_end)
            if trailers_end < 0:
                return Extent(head_done=True)
            return Extent(trailers_end + 4, head_done=True)
        available = min(size, len(buffer) - line_end - 2)
        if body + available > max_body:
            # Over the limit: the service reads past it from what is here, answers 413, and the
            # rest is never read.
            return Extent(len(buffer), close=True, head_done=True)
        body += size
        position = line_end + 2 + size + 2
        if position > len(buffer):
            return Extent(head_done=True, expects_continue=expects_continue)
