"""The fault suite's load: API clients in processes of their own (`python -m tests.faults.load SPEC`),
so the load never shares an interpreter or a GIL with the processes it measures or kills.

A member client creates leases (half with an Idempotency-Key, some keys sent twice, which must
name the same lease), renews and releases its own, and lists; an admin client cordons, drains and
uncordons hosts, moves GPUs between pools and changes quotas. Each client writes one JSON summary:
answers per operation and status, every 5xx and every connection error with its wall-clock time
(a scenario forgives those inside its outage windows only), and latencies.

A client starts its work only once the API answers it (healthz, then its own authenticated reads,
retried to a deadline): on a busy machine a client process can take seconds to start, and what it
reads first must not be mistaken for the scenario's fault. It then touches `ready_file`, and the
scenario injects its fault only once every client has (tests.faults.scenario.Load.start).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from collections import defaultdict
from typing import Any

import requests

from stacktools.ready import wait_http_ok

MEMBER_OPS = (("create", 30), ("create_keyed", 10), ("replay", 4), ("renew", 20), ("release", 22),
              ("get", 8), ("list", 6))
ADMIN_OPS = (("cordon", 15), ("uncordon", 30), ("drain", 6), ("move", 20), ("quota", 20), ("list", 9))
MAX_HELD = 6
#: How long a client waits for the API to answer it at start.
READY_TIMEOUT_S = 120
# TTLs (and renewals) of at most a minute: once the load stops, every lease it holds ends within
# one, so whatever is still pending must then be granted (the scenarios wait for that).


class Client:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.url = spec["url"] + "/api/v1"
        self.rng = random.Random(spec["seed"])
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Token {spec['token']}"
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.errors: list[dict[str, Any]] = []  # 5xx and connection failures, with their times
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.held: list[str] = []
        self.keys: dict[str, tuple[str, dict[str, Any]]] = {}  # Idempotency-Key -> (lease id, body)
        self.mismatches = 0
        # What the API acknowledged: each lease a create answered 201 for, each lease a release
        # answered 200 for. A scenario that may lose commits (a database failover) checks them.
        self.acked_creates: list[str] = []
        self.acked_releases: list[str] = []
        self.ops = 0
        self.hosts: list[int] = []
        self.gpus: list[tuple[str, str]] = []
        self.quotas: list[int] = []

    # --- one request, counted ----------------------------------------------------------------
    def call(self, op: str, method: str, path: str, **kwargs: Any) -> requests.Response | None:
        began = time.time()
        try:
            response = self.http.request(method, self.url + path, timeout=30, **kwargs)
        except requests.RequestException as error:
            self.counts[op]["conn"] += 1
            self.errors.append({"t": began, "op": op, "status": 0, "detail": type(error).__name__})
            return None
        self.latency[op].append(time.time() - began)
        self.counts[op][str(response.status_code)] += 1
        if response.status_code >= 500:
            self.errors.append({"t": began, "op": op, "status": response.status_code,
                                "json": response.headers.get("content-type", "").startswith("application/json"),
                                "retry_after": response.headers.get("retry-after"),
                                "detail": response.text[:300]})
        return response

    # --- member operations -------------------------------------------------------------------
    def body(self) -> dict[str, Any]:
        return {"pool": self.rng.choice(self.spec["pools"]), "gpus": self.rng.choice((1, 1, 2, 2, 4)),
                "ttl_seconds": self.rng.choice((20, 30, 60))}

    def create(self, key: str | None = None, body: dict[str, Any] | None = None, op: str = "create") -> None:
        headers = {"Idempotency-Key": key} if key else {}
        response = self.call(op, "POST", "/leases/", json=body or self.body(), headers=headers)
        if response is None or response.status_code not in (200, 201):
            return
        lease = response.json()["id"]
        if op == "replay":  # the same key again: the same lease, not a second one
            self.mismatches += key is not None and self.keys[key][0] != lease
            return
        self.held.append(lease)
        if response.status_code == 201:
            self.acked_creates.append(lease)
        if key:
            self.keys[key] = (lease, body or {})

    def member_op(self, op: str) -> None:
        if op in ("create", "create_keyed") and len(self.held) >= MAX_HELD:
            op = "release"
        if op in ("renew", "release", "get") and not self.held:
            op = "create"
        if op == "create":
            self.create()
        elif op == "create_keyed":
            self.create(key=str(uuid.UUID(int=self.rng.getrandbits(128))), body=self.body())
        elif op == "replay" and self.keys:
            key = self.rng.choice(list(self.keys)[-50:])
            self.create(key=key, body=self.keys[key][1], op="replay")
        elif op == "renew":
            self.call("renew", "POST", f"/leases/{self.rng.choice(self.held)}/renew/", json={"ttl_seconds": 60})
        elif op == "release":
            lease = self.held.pop(self.rng.randrange(len(self.held)))
            response = self.call("release", "POST", f"/leases/{lease}/release/")
            if response is not None and response.status_code == 200:
                self.acked_releases.append(lease)
        elif op == "get":
            self.call("get", "GET", f"/leases/{self.rng.choice(self.held)}/")
        else:
            self.call("list", "GET", "/leases/", params={"state": "pending", "limit": 20})

    # --- at start: wait until the API answers -------------------------------------------------
    def ready_get(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """GET a list at start: retried until it answers 200 (connection errors and 5xx while the
        stack warms up are not counted), its items returned."""
        deadline, last = time.monotonic() + READY_TIMEOUT_S, "no answer"
        while True:
            try:
                response = self.http.get(self.url + path, params=params, timeout=30)
                if response.status_code == 200:
                    break
                last = f"{response.status_code} {response.text[:200]!r}"
            except requests.RequestException as error:
                last = type(error).__name__
            assert time.monotonic() < deadline, (
                f"{self.spec['name']}: GET {path} did not answer 200 within {READY_TIMEOUT_S} s (last: {last})")
            time.sleep(0.5)
        payload = response.json()
        assert isinstance(payload, list) or "results" in payload, f"GET {path}: not a list: {str(payload)[:300]}"
        return _items(payload)

    def wait_ready(self) -> None:
        """Until the API answers this client: /healthz, then an authenticated read (and, for the
        admin, the hosts, GPUs and quotas it works on)."""
        wait_http_ok(self.spec["url"] + "/healthz", READY_TIMEOUT_S, what="the API (healthz)")
        self.ready_get("/leases/", limit=1)
        if self.spec.get("admin"):
            self.admin_setup()
        if self.spec.get("ready_file"):
            with open(self.spec["ready_file"], "w") as ready:
                ready.write("ready")

    def admin_setup(self) -> None:
        hosts = self.ready_get("/hosts/", limit=500)
        gpus = self.ready_get("/gpus/", limit=1000)
        self.quotas = [q["id"] for q in self.ready_get("/quotas/", limit=500)]
        self.hosts = [h["id"] for h in hosts if h["source"] in self.spec["sources"]]
        self.gpus = [(g["uuid"], g["pool"]) for g in gpus if g["pool"] in self.spec["pools"]]
        assert self.hosts and self.gpus and self.quotas, (
            f"admin: nothing to work on (hosts {len(self.hosts)}, GPUs {len(self.gpus)}, quotas {len(self.quotas)})")

    # --- admin operations --------------------------------------------------------------------
    def admin_op(self, op: str) -> None:
        if op in ("cordon", "uncordon", "drain"):
            self.call(op, "POST", f"/hosts/{self.rng.choice(self.hosts)}/{op}/")
        elif op == "move":
            gpu, _ = self.rng.choice(self.gpus)
            self.call("move", "POST", f"/gpus/{gpu}/move/", json={"pool": self.rng.choice(self.spec["pools"])})
        elif op == "quota":
            self.call("quota", "PATCH", f"/quotas/{self.rng.choice(self.quotas)}/",
                      json={"guaranteed": self.rng.randrange(0, 9)})
        else:
            self.call("list", "GET", "/hosts/")

    def admin_finish(self) -> None:
        """Leave every host schedulable, so 'nothing eligible stuck pending' can be judged."""
        for host in self.hosts:
            for _ in range(50):
                response = self.call("uncordon", "POST", f"/hosts/{host}/uncordon/")
                if response is not None and response.status_code < 500:
                    break
                time.sleep(0.5)

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        admin = self.spec.get("admin", False)
        self.wait_ready()
        table = ADMIN_OPS if admin else MEMBER_OPS
        names, weights = [n for n, _ in table], [w for _, w in table]
        deadline = time.time() + self.spec.get("duration_s", 1e9)
        stop_file = self.spec.get("stop_file")
        while self.ops < self.spec.get("ops", 10**9) and time.time() < deadline:
            if stop_file and self.ops % 20 == 0 and _exists(stop_file):
                break
            op = self.rng.choices(names, weights)[0]
            (self.admin_op if admin else self.member_op)(op)
            self.ops += 1
            if admin:
                time.sleep(self.spec.get("admin_pause_s", 0.05))
        if admin:
            self.admin_finish()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        return {"client": self.spec["name"], "ops": self.ops, "counts": {k: dict(v) for k, v in self.counts.items()},
                "errors": self.errors, "idempotency_mismatches": self.mismatches,
                "acked_creates": self.acked_creates, "acked_releases": self.acked_releases,
                "latency": {k: sorted(v) for k, v in self.latency.items()}}


def _items(payload: Any) -> list[dict[str, Any]]:
    return list(payload["results"] if isinstance(payload, dict) else payload)


def _exists(path: str) -> bool:
    return os.path.exists(path)


def main() -> None:
    spec = json.loads(sys.argv[1])
    summary = Client(spec).run()
    with open(spec["out"], "w") as out:
        json.dump(summary, out)


if __name__ == "__main__":
    main()
