"""A value the database cannot store is the client's error: a 400 naming the field (the
serializer's length limit, taken from the column), and a DataError/IntegrityError that gets past
validation is still a 400 `invalid`, never the 503 "retry" kept for an unavailable database."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.db.models import CharField

from allocation.models import Lease
from core.api.errors import exception_handler

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("field", ["min_driver_version", "min_cuda_version"])
def test_a_version_longer_than_its_column_is_a_400_naming_the_field(world: Any, api: Any, field: str) -> None:
    column = Lease._meta.get_field(field)
    assert isinstance(column, CharField) and column.max_length is not None
    limit = column.max_length
    client = api(world.member)
    fits = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1, field: "1" * limit}, format="json")
    assert fits.status_code == 201, fits.content
    too_long = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1, field: "1" * (limit + 1)},
                           format="json")
    assert too_long.status_code == 400, too_long.content
    body = too_long.json()
    assert body["code"] == "invalid" and field in body["details"], body
    assert "Retry-After" not in too_long


@pytest.mark.parametrize("error", [DataError("value too long for type character varying(32)"),
                                   IntegrityError("new row violates check constraint")])
def test_a_value_the_database_refuses_is_a_400_not_a_503(error: Exception) -> None:
    response = exception_handler(error, {})
    assert response is not None
    assert response.status_code == 400 and response.data["code"] == "invalid", response.data
    assert "Retry-After" not in response


@pytest.mark.parametrize("error", [OperationalError("server closed the connection unexpectedly"),
                                   InterfaceError("connection already closed")])
def test_an_unavailable_database_is_still_a_503_with_retry_after(error: Exception, caplog: Any) -> None:
    response = exception_handler(error, {})
    assert response is not None
    assert response.status_code == 503 and response.data["code"] == "database_unavailable", response.data
    assert response["Retry-After"] == "5"
    # Logged in one line, no traceback: during a failover every request fails so.
    (record,) = [r for r in caplog.records if r.name == "core.api.errors"]
    assert record.levelname == "WARNING" and record.exc_info is None and str(error) in record.getMessage()
