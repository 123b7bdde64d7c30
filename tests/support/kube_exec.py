"""The pod `exec` subresource of the Kubernetes test server: a real websocket on the channel
protocol the API server speaks (v5.channel.k8s.io, or v4 when the client offers only that).

Mixed into `KubeApiServer`. Served as the API server (through the kubelet) does:
    GET /api/v1/namespaces/{ns}/pods/{name}/exec?command=…&command=…&stdin=&stdout=&stderr=&tty=&container=
upgraded to a websocket (RFC 6455). Binary frames whose first byte is the channel: 0 stdin (from
the client), 1 stdout, 2 stderr, 3 the status when the command ends (a `kind: Status`-like
object: `Success`, or `Failure` with `NonZeroExitCode` and the code in `details.causes`), 4 the
terminal's size (`{"Width", "Height"}`, from the client), and on v5, 255 + channel: that channel
closed (the client's stdin at EOF). A missing pod is a 404 and one not Running a 400 before any
upgrade. The command runs here, as the pod's container would run it (`run_pod` does the same for
a pod's own command): with a pseudo-terminal for `tty=true` (stdout and stderr are one stream,
as on a real terminal), else with pipes.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import pty
import select
import struct
import subprocess
import termios
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.support.kube_dra import api_status
from tests.support.kube_logs import _send_json

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x2, 0x8, 0x9, 0xA


@dataclass(frozen=True)
class ExecCall:
    namespace: str
    pod: str
    command: tuple[str, ...]
    container: str
    tty: bool
    stdin: bool
    protocol: str


@dataclass
class PodExecRoutes:
    exec_calls: list[ExecCall] = field(default_factory=list)
    #: The commands exec started, newest last (a test sees whether a session's end ended its command).
    exec_processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    if TYPE_CHECKING:  # provided by KubeApiServer
        def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    @staticmethod
    def exec_path(method: str, path: str) -> tuple[str, str] | None:
        """(namespace, pod) when this is a pod exec request."""
        parts = [p for p in path.split("/") if p]
        if method in ("GET", "POST") and len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] \
                and parts[4] == "pods" and parts[6] == "exec":
            return parts[3], parts[5]
        return None

    def serve_exec(self, handler: BaseHTTPRequestHandler, namespace: str, name: str) -> None:
        params = parse_qs(urlsplit(handler.path).query)
        flag = lambda key: (params.get(key) or ["false"])[-1] in ("true", "1")  # noqa: E731
        pod = self.pod(namespace, name)
        offered = [p.strip() for p in (handler.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        protocol = next((p for p in PROTOCOLS if p in offered), "")
        problem = _problem(pod, name, params.get("command") or [], handler, protocol)
        if problem is not None:
            _send_json(handler, *problem)
            return
        key = (handler.headers.get("Sec-WebSocket-Key") or "").encode()
        accept = base64.b64encode(hashlib.sha1(key + GUID.encode()).digest()).decode()
        handler.send_response(101, "Switching Protocols")
        for header, value in (("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", accept),
                              ("Sec-WebSocket-Protocol", protocol)):
            handler.send_header(header, value)
        handler.end_headers()
        handler.wfile.flush()
        container = (params.get("container") or [""])[-1]
        call = ExecCall(namespace, name, tuple(params["command"]), container, flag("tty"), flag("stdin"), protocol)
        self.exec_calls.append(call)
        handler.close_connection = True
        with contextlib.suppress(OSError):
            _Session(handler.rfile, handler.wfile, call, self.exec_processes).run()


def _problem(pod: dict[str, Any] | None, name: str, command: list[str], handler: BaseHTTPRequestHandler,
             protocol: str) -> tuple[int, Any] | None:
    if pod is None:
        return 404, api_status(404, "NotFound", f'pods "{name}" not found', details={"name": name, "kind": "pods"})
    if (pod.get("status") or {}).get("phase") != "Running":
        container = pod["spec"]["containers"][0]["name"]
        return 400, api_status(400, "BadRequest", f'unable to upgrade connection: container not found ("{container}")')
    if (handler.headers.get("Upgrade") or "").lower() != "websocket" or not protocol:
        return 400, api_status(400, "BadRequest", "Upgrade request required")
    if not command:
        return 400, api_status(400, "BadRequest", "you must specify at least 1 command")
    return None


def read_frame(rfile: BufferedIOBase) -> tuple[int, bytes] | None:
    """One frame from the client (masked, as RFC 6455 has clients send); None at EOF."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = struct.unpack(">H", rfile.read(2))[0]
    elif length == 127:
        length = struct.unpack(">Q", rfile.read(8))[0]
    mask = rfile.read(4) if head[1] & 0x80 else b""
    data = rfile.read(length)
    if mask:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return opcode, data


def frame(opcode: int, data: bytes) -> bytes:
    """One unmasked, final frame (from the server)."""
    size = len(data)
    if size < 126:
        head = struct.pack(">BB", 0x80 | opcode, size)
    elif size < 65536:
        head = struct.pack(">BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, size)
    return head + data


def status_of(code: int, command: tuple[str, ...]) -> dict[str, Any]:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: error executing command {list(command)}, "
                       f"exit code {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class _Session:
    """One exec: the command here, its output sent as frames, the client's frames to its input."""

    def __init__(self, rfile: BufferedIOBase, wfile: BufferedIOBase, call: ExecCall,
                 started: list[subprocess.Popen[bytes]]) -> None:
        self.rfile, self.wfile, self.call, self.started = rfile, wfile, call, started
        self.lock = threading.Lock()
        self.tty_fd: int | None = None

    def send(self, opcode: int, data: bytes) -> None:
        with self.lock:
            self.wfile.write(frame(opcode, data))
            self.wfile.flush()

    def run(self) -> None:
        process, outputs = self._start()
        self.started.append(process)
        threading.Thread(target=self._receive, args=(process,), name="exec-stdin", daemon=True).start()
        while outputs:
            ready, _, _ = select.select(list(outputs), [], [])
            for fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # a pseudo-terminal whose command ended: EIO
                    data = b""
                if data:
                    self.send(OP_BINARY, bytes([outputs[fd]]) + data)
                else:
                    del outputs[fd]
        code = process.wait()
        self.send(OP_BINARY, b"\x03" + json.dumps(status_of(code, self.call.command)).encode())
        self.send(OP_CLOSE, struct.pack(">H", 1000))

    def _start(self) -> tuple[subprocess.Popen[bytes], dict[int, int]]:
        argv = list(self.call.command)
        if self.call.tty:
            master, slave = pty.openpty()
            process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
            os.close(slave)
            self.tty_fd = master
            return process, {master: 1}
        process = subprocess.Popen(argv, stdin=subprocess.PIPE if self.call.stdin else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        return process, {process.stdout.fileno(): 1, process.stderr.fileno(): 2}

    def _receive(self, process: subprocess.Popen[bytes]) -> None:
        """The client's frames: stdin, its end, the terminal's size; a close hangs the command up."""
        while (got := read_frame(self.rfile)) is not None:
            opcode, data = got
            if opcode == OP_CLOSE:
                break
            if opcode == OP_PING:
                self.send(OP_PONG, data)
            elif data[:1] == b"\x00":
                self._stdin(process, data[1:])
            elif data[:1] == b"\x04" and self.tty_fd is not None:
                size = json.loads(data[1:])
                fcntl.ioctl(self.tty_fd, termios.TIOCSWINSZ, struct.pack("HHHH", size["Height"], size["Width"], 0, 0))
            elif data[:2] == b"\xff\x00":  # v5: stdin closed
                self._stdin(process, None)
        with contextlib.suppress(ProcessLookupError):
            process.kill()

    def _stdin(self, process: subprocess.Popen[bytes], data: bytes | None) -> None:
        with contextlib.suppress(OSError):
            if self.tty_fd is not None:
                os.write(self.tty_fd, b"\x04" if data is None else data)  # EOF on a terminal: ^D
            elif process.stdin is not None:
                if data is None:
                    process.stdin.close()
                else:
                    process.stdin.write(data)
                    process.stdin.flush()
