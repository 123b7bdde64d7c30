"""Per-host backoff of discovery (agents.host_backoff): the arithmetic, the `backoff:` entry of an
ssh source, and which kinds back off per host at all."""

from __future__ import annotations

from typing import Any

import pytest

from agents.host_backoff import JITTER, HostBackoff, backoff_config_errors
from agents.kubernetes import KubernetesConnector
from agents.simulated import SimulatedConnector
from agents.ssh import SshConnector
from tests.support.sshd import pinned_config


def test_the_delay_doubles_from_30_s_up_to_15_min() -> None:
    backoff = HostBackoff()
    assert [backoff.delay_s(n, 0.0) for n in range(1, 9)] == [30, 60, 120, 240, 480, 900, 900, 900]


def test_no_failure_is_no_delay_and_a_huge_count_is_the_cap_not_an_overflow() -> None:
    backoff = HostBackoff(initial_s=5, max_s=60)
    assert backoff.delay_s(0, 0.5) == 0.0
    assert backoff.delay_s(100_000, 0.0) == 60


def test_jitter_only_shortens_and_never_undoes_the_growth() -> None:
    backoff = HostBackoff()
    assert backoff.delay_s(6, 0.999) >= 900 * (1 - JITTER) and backoff.delay_s(6, 0.0) == 900
    for failures in range(1, 6):  # below the cap: the shortest next delay beats the longest this one
        assert backoff.delay_s(failures + 1, 0.999) > backoff.delay_s(failures, 0.0)


def test_a_source_entry_sets_its_numbers_and_defaults_fill_the_rest() -> None:
    assert HostBackoff.from_config(None) == HostBackoff(30, 900)
    assert HostBackoff.from_config({"initial_s": 5}) == HostBackoff(5, 900)
    assert HostBackoff.from_config({"initial_s": 5, "max_s": 60}) == HostBackoff(5, 60)
    assert HostBackoff.from_config({"initial_s": 1200}) == HostBackoff(1200, 1200)  # the cap is never below


@pytest.mark.parametrize(("value", "words"), [
    ({"initial_s": 0}, "initial_s must be a positive number of seconds"),
    ({"max_s": True}, "max_s must be a positive number of seconds"),
    ({"max_s": "15m"}, "max_s must be a positive number of seconds"),
    ({"initial_s": 60, "max_s": 30}, "max_s must be at least initial_s"),
    ({"initial": 30}, "unknown key 'initial'"),
    ([30, 900], "backoff must be a mapping of initial_s and max_s"),
])
def test_a_bad_backoff_entry_is_refused_in_words(value: Any, words: str) -> None:
    assert any(words in e for e in backoff_config_errors(value)), backoff_config_errors(value)
    assert any(words in e for e in SshConnector.validate_config(pinned_config(backoff=value)))


def test_a_good_backoff_entry_passes_and_reaches_the_connector() -> None:
    config = pinned_config(backoff={"initial_s": 10, "max_s": 300})
    assert SshConnector.validate_config(config) == []
    assert SshConnector("lab", config).host_backoff() == HostBackoff(10, 300)
    assert SshConnector("lab", pinned_config()).host_backoff() == HostBackoff()


def test_only_the_kinds_that_probe_each_host_on_its_own_back_off() -> None:
    # A Kubernetes cluster is one list call whatever its nodes do; the simulated fleet costs nothing.
    assert KubernetesConnector("prod", {"host": "https://127.0.0.1:1"}).host_backoff() is None
    assert SimulatedConnector("demo", {"hosts": 1}).host_backoff() is None
