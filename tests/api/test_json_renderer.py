"""The orjson renderer and parser (core/api/renderers.py) give what DRF's stock JSON renderer and
parser give: the same JSON values, DRF's datetime format, escaped U+2028/U+2029, and the same
answers to bodies orjson alone would refuse differently."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from typing import Any

import pytest
from django.utils.functional import lazy
from rest_framework import parsers, renderers
from rest_framework.exceptions import ParseError

from core.api.renderers import JSONParser, JSONRenderer

UTC = datetime.UTC
SAMPLES: list[Any] = [
    {"at": datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
     "whole": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
     "offset": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
     "naive": datetime.datetime(2026, 1, 2, 3, 4, 5), "day": datetime.date(2026, 1, 2),
     "time": datetime.time(3, 4, 5, 600), "span": datetime.timedelta(seconds=90)},
    {"id": uuid.UUID("12345678-1234-5678-1234-567812345678"), "price": decimal.Decimal("1.25"),
     "lazy": lazy(lambda: "later", str)(), 1: "int key", "tuple": (1, 2), "nested": [{"a": None, "b": True}]},
    {"text": "line\u2028separator\u2029 and ünïcödé ✓", "big": 2**70, "float": 0.1},
    [1, "two", 3.0, None],
]


@pytest.mark.parametrize("data", SAMPLES)
def test_the_renderer_gives_the_stock_renderers_json(data: object) -> None:
    ours, stock = JSONRenderer().render(data), renderers.JSONRenderer().render(data)
    assert json.loads(ours) == json.loads(stock)
    assert b"\xe2\x80\xa8" not in ours and b"\xe2\x80\xa9" not in ours


def test_datetimes_keep_drfs_format() -> None:
    rendered = json.loads(JSONRenderer().render(SAMPLES[0]))
    assert rendered["at"] == "2026-01-02T03:04:05.678901Z" and rendered["whole"] == "2026-01-02T03:04:05Z"
    assert rendered["offset"] == "2026-01-02T03:04:05+02:00"


def test_indented_output_is_still_offered() -> None:
    assert JSONRenderer().render({"a": 1}, "application/json; indent=2") == b'{\n  "a": 1\n}'


@pytest.mark.parametrize("body", [b'{"gpus": 2, "pool": "training"}', b'{"big": 123456789012345678901234567890}',
                                  '{"name": "ü"}'.encode(), b"[]", b"null"])
def test_the_parser_accepts_what_the_stock_parser_accepts(body: bytes) -> None:
    assert JSONParser().parse(io.BytesIO(body)) == parsers.JSONParser().parse(io.BytesIO(body))


@pytest.mark.parametrize("body", [b"garbage", b"{", b"\xff\xfe", b'{"a": NaN}', b""])
def test_the_parser_refuses_what_the_stock_parser_refuses(body: bytes) -> None:
    with pytest.raises(ParseError) as ours:
        JSONParser().parse(io.BytesIO(body))
    with pytest.raises(ParseError) as stock:
        parsers.JSONParser().parse(io.BytesIO(body))
    assert str(ours.value.detail) == str(stock.value.detail)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
def test_drf_datetime_writes_what_drfs_datetimefield_writes(zone: str) -> None:
    import zoneinfo

    from django.utils import timezone
    from rest_framework import serializers

    from core.api.renderers import drf_datetime

    values = [SAMPLES[0]["at"], SAMPLES[0]["whole"], SAMPLES[0]["offset"], None]
    with timezone.override(zoneinfo.ZoneInfo(zone)):
        tz = timezone.get_current_timezone()
        assert [drf_datetime(v, tz) for v in values] == [serializers.DateTimeField().to_representation(v)
                                                         for v in values]
