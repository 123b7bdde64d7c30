"""`gpupool login` checks the URL and token, then saves them (mode 0600) for later commands, as the
current context of the contexts file (issue 25; tests/cli/test_contexts.py has the rest)."""

from __future__ import annotations

import json
import os
import stat

import pytest


@pytest.mark.django_db(transaction=True)
def test_login_saves_a_private_config_that_later_commands_use(server, monkeypatch, tmp_path) -> None:
    path = tmp_path / "config.json"
    monkeypatch.delenv("GPUPOOL_URL")
    monkeypatch.delenv("GPUPOOL_TOKEN")
    assert server.run("pools")[0] == 2  # nothing configured yet
    code, out, _ = server.run("login", "--url", server.url, "--token", server.token)
    assert code == 0 and str(path) in out
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text()) == {"current-context": "default",
                                            "contexts": {"default": {"url": server.url, "token": server.token}}}
    assert server.run("pools")[0] == 0


@pytest.mark.django_db(transaction=True)
def test_login_with_a_bad_token_saves_nothing(server, monkeypatch, tmp_path) -> None:
    code, _, err = server.run("login", "--url", server.url, "--token", "nope")
    assert code == 3 and "authentication_failed" in err
    assert not (tmp_path / "config.json").exists()
