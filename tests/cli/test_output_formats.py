"""Output for people and for scripts: colour by state on a terminal only (never with NO_COLOR, never
on a pipe), `-o json|yaml` that parse, `-o wide`, `--no-headers`, "No leases found." on an empty
list, and a list cut at --limit that says how many more there are."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from typing import Any

import pytest
import yaml

from allocation.engine import run_pass

pytestmark = pytest.mark.django_db(transaction=True)
ANSI = "\x1b["


def _on_a_terminal(server: Any, *argv: str, **env: str) -> str:
    """`gpupool ARGV` with stdout on a pseudo-terminal; what it printed there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gpupool_cli", *argv], stdout=follower, stderr=subprocess.PIPE,
                            env=server.env(COLUMNS="200", TERM="xterm-256color", **env))
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode()


def _two_leases(server: Any) -> None:
    """One granted lease, one pending (asked after the pass)."""
    server.run("request", "--pool", "training", "--gpus", "2", "-o", "json")
    run_pass()
    server.run("request", "--pool", "training", "--gpus", "1", "-o", "json")


def test_states_are_coloured_on_a_terminal_and_plain_with_no_color_or_on_a_pipe(server: Any) -> None:
    _two_leases(server)
    coloured = _on_a_terminal(server, "ls")
    assert ANSI in coloured and "granted" in coloured
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR",)}
    assert ANSI not in _on_a_terminal(server, "ls", NO_COLOR="1")
    piped = subprocess.run([sys.executable, "-m", "gpupool_cli", "ls"], capture_output=True, text=True,
                           env=server.env(**{k: env[k] for k in ("PATH",)}), timeout=60)
    assert piped.returncode == 0 and ANSI not in piped.stdout and "granted" in piped.stdout
    assert all(line == line.rstrip() for line in piped.stdout.splitlines())  # no trailing spaces on a pipe


def test_json_and_yaml_parse_to_the_apis_objects(server: Any) -> None:
    _two_leases(server)
    _, out, _ = server.run("ls", "-o", "json")
    leases = json.loads(out)
    assert {x["state"] for x in leases} == {"granted", "pending"}
    _, out, _ = server.run("-o", "yaml", "ls")
    assert yaml.safe_load(out) == leases
    _, out, _ = server.run("show", leases[0]["id"][:8], "-o", "yaml")
    assert yaml.safe_load(out)["id"] == leases[0]["id"]
    _, out, _ = server.run("top", "--once", "-o", "json")
    assert set(json.loads(out)) == {"pools", "quotas", "queue"}


def test_wide_shows_full_ids_and_no_headers_drops_the_header(server: Any) -> None:
    _two_leases(server)
    _, out, _ = server.run("ls", "-o", "json")
    ids = {x["id"] for x in json.loads(out)}
    _, wide, _ = server.run("ls", "-o", "wide")
    header, *rows = wide.splitlines()
    assert "QUEUE" in header and "GPU UUIDS" in header
    assert {row.split()[0] for row in rows} == ids
    _, plain, _ = server.run("ls", "--no-headers")
    assert len(plain.splitlines()) == 2 and not plain.startswith("ID")


def test_an_empty_list_says_so_on_stderr(server: Any) -> None:
    code, out, err = server.run("ls")
    assert (code, out, err) == (0, "", "No leases found.\n")
    code, out, _ = server.run("ls", "-o", "json")
    assert code == 0 and json.loads(out) == []


def test_a_list_past_its_limit_says_how_many_more_and_all_lists_them_all(server: Any) -> None:
    for _ in range(12):
        server.run("request", "--pool", "inference", "--gpus", "1", "-o", "json")
    code, out, err = server.run("ls", "--limit", "5")
    assert code == 0 and len(out.splitlines()) == 1 + 5
    assert err == "… 7 more leases (showing 5 of 12): --limit 0 lists them all\n"
    _, out, err = server.run("ls", "--limit", "0", "-o", "json")
    assert len(json.loads(out)) == 12 and err == ""
    _, out, _ = server.run("ls", "--all", "--no-headers")
    assert len(out.splitlines()) == 12
