"""A real HTTP receiver of webhooks on 127.0.0.1: records every POST (headers, raw body, arrival
time) and answers with the statuses it is given in turn (200 once they run out); `hold` makes it
keep a request open until released (a sender killed mid-delivery)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.loopback import LoopbackServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() on arrival

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def signed_with(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(self.headers.get("X-Gpupool-Signature", ""), expected)


class WebhookReceiver(LoopbackServer):
    def __init__(self, statuses: list[int] | None = None) -> None:
        self._httpd = None
        self.received: list[Received] = []
        self.statuses = list(statuses or [])
        self.hold = threading.Event()
        self.hold.set()  # set: answer at once
        self.arrived = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.received.append(Received(dict(self.headers.items()), body, time.time()))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.arrived.set()
                receiver.hold.wait(60)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._listen(Handler)
        return self

    def events(self, name: str | None = None) -> list[Received]:
        return [r for r in self.received if name is None or r.json["event"] == name]
