"""The production web server the watch tests wait on (gunicorn + uvicorn on pool.asgi), one per
test module, fed by the Redis stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.processes import web_server


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[str]:
    """The API's base URL (…/api/v1/) of a web server started for the module."""
    with django_db_blocker.unblock(), web_server(tmp_path_factory.mktemp("web") / "web.log",
                                                 GPUPOOL_AUTOSCHEDULE="0") as url:
        yield url + "/api/v1/"
