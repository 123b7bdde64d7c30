"""`gpupool exec ID [-i] [-t] -- CMD…`: a command in a pod lease's container, through the server's
websocket (`GET leases/{id}/exec/`, subprotocol v1.exec.gpupool.io: no kubeconfig here).

Messages are bytes whose first byte is the channel: 0 stdin, 4 the terminal's size and 255+0
(stdin ended) from us; 1 stdout, 2 stderr and 3 the end (`{"exit_code", "message"}`) from the
server. With `-t` this terminal is put in raw mode (every key goes to the command, Ctrl-C too)
and its size follows the window (SIGWINCH); it is restored on the way out."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import click

from gpupool_cli.context import Ctx
from gpupool_cli.errors import EXIT_API, ApiError, CliError, UsageError
from gpupool_cli.leases import resolve_lease
from gpupool_cli.options import complete_leases, current, global_options

PROTOCOL = "v1.exec.gpupool.io"
STDIN, STDOUT, STDERR, END, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
CONNECT_TIMEOUT_S = 15.0


def exec_url(ctx: Ctx, lease_id: str, command: tuple[str, ...], *, tty: bool, stdin: bool) -> str:
    base = ctx.client.base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    query = urlencode([*(("command", word) for word in command), ("tty", str(tty).lower()),
                       ("stdin", str(stdin).lower())])
    return f"{base}leases/{lease_id}/exec/?{query}"


def connect(ctx: Ctx, url: str) -> Any:
    """The open websocket; the server's refusal as the API's error (404: exit 3; 409 says why)."""
    import websocket

    try:
        ws = websocket.create_connection(url, header=[f"Authorization: Token {ctx.client.config.token}"],
                                         subprotocols=[PROTOCOL], timeout=CONNECT_TIMEOUT_S)
    except websocket.WebSocketBadStatusException as exc:
        try:
            body = json.loads(exc.resp_body or b"{}")
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        raise ApiError(str(body.get("message") or exc), code=str(body.get("code") or f"http_{exc.status_code}"),
                       status=exc.status_code) from None
    except (OSError, websocket.WebSocketException) as exc:
        raise CliError(f"cannot reach {url.split('?')[0]}: {exc}", code="unreachable", transient=True) from None
    ws.settimeout(None)  # a quiet command may send nothing for hours
    return ws


@contextlib.contextmanager
def raw_terminal(ws: Any) -> Iterator[None]:
    """This terminal in raw mode, its size sent now and on every change; restored after."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)

    def send_size(*_: Any) -> None:
        size = shutil.get_terminal_size()
        with contextlib.suppress(Exception):
            ws.send_binary(bytes([RESIZE]) + json.dumps({"width": size.columns, "height": size.lines}).encode())

    previous = signal.signal(signal.SIGWINCH, send_size)
    try:
        tty.setraw(fd)
        send_size()
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, previous)


def pass_stdin(ws: Any) -> None:
    """This process's input to the command, then its end (a thread: reads block)."""
    fd = sys.stdin.fileno()
    with contextlib.suppress(Exception):  # the session ended under us: nothing left to feed
        while data := os.read(fd, 65536):
            ws.send_binary(bytes([STDIN]) + data)
        ws.send_binary(bytes([CLOSE, STDIN]))


def pump(ws: Any) -> dict[str, Any]:
    """Write what comes to stdout and stderr until the end; returns the end's status."""
    import websocket

    out, err = sys.stdout.buffer, sys.stderr.buffer
    while True:
        try:
            opcode, data = ws.recv_data()
        except (OSError, websocket.WebSocketException) as exc:
            raise CliError(f"the exec stream broke: {exc}", code="stream_broken") from None
        if opcode == websocket.ABNF.OPCODE_CLOSE or not data:
            raise CliError("the server closed the exec stream before the command's end", code="stream_broken")
        channel, payload = data[0], data[1:]
        if channel in (STDOUT, STDERR):
            target = out if channel == STDOUT else err
            target.write(payload)
            target.flush()
        elif channel == END:
            end: dict[str, Any] = json.loads(payload)
            return end


@click.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-i", "--stdin", "with_stdin", is_flag=True, help="pass this input on to the command")
@click.option("-t", "--tty", "with_tty", is_flag=True, help="a terminal for the command (with -i: interactive)")
@click.argument("lease_id", metavar="ID", shell_complete=complete_leases)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND...")
@global_options
def cmd_exec(with_stdin: bool, with_tty: bool, lease_id: str, command: tuple[str, ...]) -> int:
    """Run a command in a pod lease's container, through the server (no kubeconfig needed).
    Exits with the command's exit code.

    \b
    gpupool exec 5f0c -- nvidia-smi
    gpupool exec -it 5f0c -- bash                        an interactive shell in the pod
    tar c data | gpupool exec -i 5f0c -- tar x -C /scratch
    """
    ctx = current()
    if command[:1] == ("--",):
        command = command[1:]
    if not command:
        raise UsageError("say what to run after --, e.g. gpupool exec ID -- nvidia-smi")
    if with_tty and not sys.stdin.isatty():
        ctx.note("-t ignored: the input is not a terminal")
        with_tty = False
    ws = connect(ctx, exec_url(ctx, resolve_lease(ctx, lease_id), command, tty=with_tty, stdin=with_stdin))
    try:
        with raw_terminal(ws) if with_tty else contextlib.nullcontext():
            if with_stdin:
                threading.Thread(target=pass_stdin, args=(ws,), name="exec-stdin", daemon=True).start()
            end = pump(ws)
    finally:
        with contextlib.suppress(Exception):
            ws.close()
    if isinstance(end.get("exit_code"), int):
        return int(end["exit_code"])
    ctx.note(f"error: {end.get('message') or 'the command ended without an exit code'}", style="red")
    return EXIT_API


COMMANDS = (cmd_exec,)
