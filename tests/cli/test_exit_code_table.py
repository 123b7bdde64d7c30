"""Exit codes are the ones `gpupool --help` lists: 3 for anything not found (a lease, a pool, a
team, a priority class), 2 for usage, 124 for --timeout (tests/cli/test_wait_survives_the_server.py),
130 Ctrl-C, 143 SIGTERM; and shell completion comes from Click."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from gpupool_cli.errors import EXIT_CODES

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_help_lists_every_exit_code(server: Any) -> None:
    code, out, _ = server.run("--help")
    assert code == 0 and "Exit codes:" in out
    for exit_code, _text in EXIT_CODES:
        assert f"  {exit_code:>3}  " in out


@pytest.mark.parametrize("flag, value, code", [("--pool", "nowhere", "unknown_pool"),
                                               ("--team", "nobody", "unknown_team"),
                                               ("--priority", "urgent", "unknown_priority_class")])
def test_an_unknown_name_in_a_request_is_exit_3(server: Any, flag: str, value: str, code: str) -> None:
    argv = ["request", "--gpus", "1", flag, value] + ([] if flag == "--pool" else ["--pool", "training"])
    exit_code, out, err = server.run(*argv)
    assert exit_code == 3 and out == "" and f"({code})" in err, err


def test_usage_errors_are_exit_2_with_clicks_message(server: Any) -> None:
    code, _, err = server.run("request", "--gpus", "0", "--pool", "training")
    assert code == 2 and "Invalid value for '--gpus'" in err
    code, _, err = server.run("ls", "--state", "asleep")
    assert code == 2 and "Invalid value for '--state'" in err


def test_completion_scripts_and_completion_of_commands(server: Any) -> None:
    code, out, _ = server.run("completion", "bash")
    assert code == 0 and "_GPUPOOL_COMPLETE=bash_complete" in out
    env = server.env(_GPUPOOL_COMPLETE="bash_complete", COMP_WORDS="gpupool re", COMP_CWORD="1")
    done = subprocess.run([sys.executable, "-m", "gpupool_cli"], env=env, capture_output=True, text=True, timeout=60)
    assert {"plain,release", "plain,renew", "plain,request", "plain,reservations"} <= set(done.stdout.split())
