"""`gpupool request --count N`: N identical lease requests in as few calls as the server's batch
limit allows (`POST leases/batch/`, 1,000 items a call), each item under its own Idempotency-Key,
so that a call repeated after a lost answer finds the leases it made instead of making more."""

from __future__ import annotations

import uuid
from typing import Any

from gpupool_cli.context import Ctx
from gpupool_cli.errors import CliError

BATCH_MAX = 1_000  # the server's limit per call


def create_leases(ctx: Ctx, body: dict[str, Any], count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """POST `count` copies of the lease request `body`; returns (the leases, the failed items'
    results: `{"index", "status", "error"}`, their index counted over all calls)."""
    run = uuid.uuid4().hex[:16]
    leases: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for start in range(0, count, BATCH_MAX):
        items = [{**body, "idempotency_key": f"gpupool-cli-{run}-{i}"}
                 for i in range(start, min(count, start + BATCH_MAX))]
        answer = ctx.client.request("POST", "leases/batch/", json={"leases": items}, idempotent=True)
        for result in answer["results"]:
            if "lease" in result:
                leases.append(result["lease"])
            else:
                failed.append({**result, "index": start + result["index"]})
    return leases, failed


def failure(failed: list[dict[str, Any]], count: int) -> CliError:
    """The error of a `--count` request some of whose items failed: how many, and the first one's
    reason (the others are usually the same)."""
    first = failed[0]["error"]
    return CliError(f"{len(failed)} of {count} lease requests failed; the first: {first.get('message', '')}",
                    code=str(first.get("code", "batch_failed")))
