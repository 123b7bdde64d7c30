"""Contexts: `login --with-token` reads the token from stdin (never the command line), saves it as
a named context; `config get-contexts`, `use-context`, `--context` pick the server of a command.
A file of the first CLI (one url and token) still works."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPOOL_URL")
    monkeypatch.delenv("GPUPOOL_TOKEN")


def _login(server: Any, monkeypatch: pytest.MonkeyPatch, token: str, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(token + "\n"))
    return server.run("login", "--url", server.url, "--with-token", *argv)


def test_login_with_token_reads_stdin_and_saves_a_named_context(server: Any, unset: None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _login(server, monkeypatch, server.token, "--context", "lab")
    assert code == 0, err
    assert "as context 'lab'" in out
    saved = json.loads(server.config.read_text())
    assert saved == {"current-context": "lab", "contexts": {"lab": {"url": server.url, "token": server.token}}}
    assert server.run("pools")[0] == 0


def test_login_with_token_as_a_process_takes_the_token_from_a_pipe(server: Any, unset: None) -> None:
    env = {k: v for k, v in server.env().items() if k not in ("GPUPOOL_URL", "GPUPOOL_TOKEN")}
    done = subprocess.run([sys.executable, "-m", "gpupool_cli", "login", "--url", server.url, "--with-token"],
                          input=server.token + "\n", env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert server.token not in done.stdout + done.stderr
    empty = subprocess.run([sys.executable, "-m", "gpupool_cli", "login", "--url", server.url, "--with-token"],
                           input="", env=env, capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "(no_token)" in empty.stderr


def test_contexts_are_listed_switched_and_chosen_per_command(server: Any, unset: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert _login(server, monkeypatch, server.token, "--context", "good")[0] == 0
    saved = json.loads(server.config.read_text())
    saved["contexts"]["stale"] = {"url": server.url, "token": "revoked-long-ago"}
    server.config.write_text(json.dumps(saved))
    code, out, _ = server.run("config", "get-contexts")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["CURRENT", "NAME", "URL", "TOKEN"]
    assert lines[1].split()[:2] == ["*", "good"] and lines[2].split()[0] == "stale"
    assert server.token not in out  # only a token's first characters are shown
    assert server.run("config", "use-context", "stale")[0] == 0
    assert server.run("config", "current-context")[1] == "stale\n"
    assert server.run("pools")[0] == 3  # the stale token
    assert server.run("pools", "--context", "good")[0] == 0  # one command on another context
    code, _, err = server.run("config", "use-context", "nowhere")
    assert code == 3 and "(unknown_context)" in err
    assert server.run("pools", "--context", "nowhere")[0] == 3
    assert server.run("config", "delete-context", "stale")[0] == 0
    assert "stale" not in json.loads(server.config.read_text())["contexts"]


def test_a_config_file_of_the_first_cli_still_works(server: Any, unset: None) -> None:
    server.config.write_text(json.dumps({"url": server.url, "token": server.token}))
    assert server.run("pools")[0] == 0
    _, out, _ = server.run("config", "get-contexts", "-o", "json")
    assert json.loads(out) == [{"name": "default", "url": server.url, "current": True}]
