"""The fault suite's stack: one per test module (PostgreSQL, Redis, web, two workers, beat of its
own), torn down after it. The agent-fault modules (SSH, Kubernetes, clock skew) do not use it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.faults.scenario import config, users
from tests.faults.servers import missing_reason
from tests.faults.stack import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    reason = missing_reason()
    if reason:
        pytest.skip(f"fault stack tier skipped: {reason}")
    built = Stack(tmp_path_factory.mktemp("stack"), config(), users())
    try:
        built.start()
        yield built
    finally:
        built.stop()
