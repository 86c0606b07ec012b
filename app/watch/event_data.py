"""A server-sent event's `data:` field: its record as compact JSON on one line, as every line
reader splits it.

JSON escapes every C0 control, so no `\\n` or `\\r` can break the line; the SSE parser splits at
nothing else. But U+0085 (NEL), U+2028 and U+2029, which a plant's name or tag may hold, are line
ends to Python's `str.splitlines()` and some JavaScript line readers: sent raw, they would cut the
event in two there. They go as the JSON escapes `\\u0085`, `\\u2028` and `\\u2029`, which every
JSON parser reads as the same characters; the rest stays raw UTF-8 (the bytes a page sends).
"""

from __future__ import annotations

import json
from typing import Any

#: The line ends beyond ASCII that `str.splitlines()` knows (the ASCII ones JSON escapes already).
_LINE_ENDS = (("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def event_data(record: dict[str, Any]) -> str:
    """`record` as the JSON of a `data:` line, with no character a line reader splits at."""
    data = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    if data.isascii():  # a flag of the string, not a scan: most events end here
        return data
    for end, escaped in _LINE_ENDS:
        if end in data:  # a fast search: `str.translate` maps every character through its table
            data = data.replace(end, escaped)
    return data
