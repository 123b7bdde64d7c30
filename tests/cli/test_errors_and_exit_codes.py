"""Errors are one line on stderr, `error: <message> (<code>)`, with meaningful exit codes:
1 API error, 2 usage, 3 not found or not allowed."""

from __future__ import annotations

import pytest


@pytest.mark.django_db(transaction=True)
def test_a_bad_token_is_one_line_and_exit_3(server, monkeypatch) -> None:
    monkeypatch.setenv("GPUPOOL_TOKEN", "wrong")
    code, out, err = server.run("pools")
    assert code == 3 and out == ""
    assert err == "error: Invalid token. (authentication_failed)\n"


@pytest.mark.django_db(transaction=True)
def test_usage_errors_exit_2(server) -> None:
    assert server.run("request", "--gpus", "two")[0] == 2
    assert server.run("frobnicate")[0] == 2
    code, _, err = server.run("request", "--gpus", "1", "--pool", "training", "--ttl", "soon")
    assert code == 2 and err == "error: not a duration: 'soon' (use e.g. 90s, 30m, 2h, 1d) (bad_duration)\n"


@pytest.mark.django_db(transaction=True)
def test_an_unknown_lease_is_exit_3_and_a_refused_request_is_exit_1(server) -> None:
    code, _, err = server.run("show", "00000000-0000-0000-0000-000000000000")
    assert code == 3 and err == "error: Not found. (not_found)\n"
    code, _, err = server.run("request", "--gpus", "9", "--pool", "training")
    assert code == 1 and err.startswith("error: pool training has at most 8 GPUs") and "(unsatisfiable)" in err


@pytest.mark.django_db(transaction=True)
def test_an_unreachable_server_is_exit_1(server, monkeypatch) -> None:
    monkeypatch.setenv("GPUPOOL_URL", "http://127.0.0.1:9")
    code, _, err = server.run("pools")
    assert code == 1 and err == "error: cannot reach http://127.0.0.1:9/api/v1/ (connection refused) (unreachable)\n"
