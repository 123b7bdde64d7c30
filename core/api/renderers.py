"""JSON in and out with orjson, 3-10× faster than the stdlib json of DRF's stock renderer and parser.

Same output as DRF's JSONRenderer: compact, UTF-8, datetimes as DRF's encoder writes them (ISO 8601,
`Z` for UTC; orjson's own datetime format is handed back to that encoder), U+2028/U+2029 escaped.
Anything orjson cannot encode (integers beyond 64 bits, keys that are not strings, objects DRF's
encoder knows but orjson's hook does not hand over) and
indented output (`Accept: application/json; indent=4`) go through the stock renderer, so no answer
that rendered before fails now. Bodies orjson refuses are parsed again by the stock parser."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from datetime import datetime, tzinfo
from typing import Any

import orjson
from rest_framework import parsers, renderers
from rest_framework.exceptions import ParseError
from rest_framework.utils import encoders

_ENCODER = encoders.JSONEncoder()
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME  # (OPT_NON_STR_KEYS would double the cost of every dict)
_LONG_NUMBER = re.compile(rb"\d{19}")


def drf_datetime(value: datetime | None, tz: tzinfo) -> str | None:
    """What DRF's DateTimeField writes for `value` (ISO 8601 in the current time zone `tz`, UTC as
    `Z`; None for None), without its lookup of the current time zone on every call (asgiref
    locals: ~2 µs, ten times a lease). Hand-written representations take `tz` once per answer
    (django.utils.timezone.get_current_timezone())."""
    if not value:
        return None
    text = value.astimezone(tz).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class JSONRenderer(renderers.JSONRenderer):
    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Mapping[str, Any] | None = None) -> bytes:
        if data is None:
            return b""
        if self.get_indent(accepted_media_type or "", renderer_context or {}) is not None:
            return super().render(data, accepted_media_type, renderer_context)
        try:
            out = orjson.dumps(data, default=_ENCODER.default, option=_OPTIONS)
        except orjson.JSONEncodeError:
            return super().render(data, accepted_media_type, renderer_context)
        # As DRF does: JSON that is also a strict JavaScript subset.
        if b"\xe2\x80\xa8" in out or b"\xe2\x80\xa9" in out:
            out = out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return out


class JSONParser(parsers.JSONParser):
    renderer_class = JSONRenderer

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = stream.read() if stream is not None else b""
        # orjson reads integers beyond 64 bits as floats (precision lost): bodies with 19 digits in
        # a row, and other charsets, go to the stock parser.
        # DRF's get_encoding (the charset, text codecs only) is missing from djangorestframework-stubs.
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]
        if encoding.lower().replace("-", "") == "utf8" and not _LONG_NUMBER.search(raw):
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                pass
        # What orjson refuses the stock parser decides, so the same bodies are accepted, and
        # refused with the same message. Nesting deeper than the interpreter's recursion limit
        # (orjson stops at 1,024 levels) is a malformed body, not a server error.
        try:
            return super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
