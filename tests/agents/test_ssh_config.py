"""SSH source configuration, pinned keys and the remote scripts' text; no sshd needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agents import ssh_scripts
from agents.base import AgentError, BindRequest
from agents.ssh import SshConnector
from agents.ssh_session import PinnedKey, load_private_key
from tests.support.sshd import new_ed25519, pinned_config, sample_public_key

PUBLIC = sample_public_key()
config = pinned_config


def test_a_complete_entry_has_no_errors() -> None:
    assert SshConnector.validate_config(config()) == []
    assert {"user", "key_file", "private_key", "nvidia_smi", "hosts", "connect_timeout",
            "command_timeout", "max_parallel"} <= SshConnector.config_keys  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"user": ""}, "user is required"),
        ({"private_key": "x"}, "exactly one of key_file or private_key"),
        ({"hosts": []}, "hosts must be a non-empty list"),
        ({"hosts": [{"port": 22, "host_key": PUBLIC}]}, "hosts[0]: address is required"),
        ({"hosts": [{"address": "h"}]}, "hosts[0]: host_key must look like"),
        ({"hosts": [{"address": "h", "host_key": "ssh-ed25519 AAAA"}]}, "not valid base64"),
        ({"hosts": [{"address": "h", "host_key": "ssh-dss AAAA"}]}, "unsupported host key type"),
        ({"hosts": [{"address": "h", "port": 0, "host_key": PUBLIC}]}, "port must be 1-65535"),
        ({"hosts": [{"address": "h", "host_key": PUBLIC}] * 2}, "duplicate host name 'h'"),
        ({"nvidia_smi": "'unclosed"}, "nvidia_smi is not a valid command line"),
        ({"max_parallel": 0}, "max_parallel must be a positive number"),
        ({"command_timeout": "30"}, "command_timeout must be a positive number"),
        ({"password": "x"}, "unknown key 'password'"),
    ],
)
def test_config_errors_say_what_is_wrong(overrides: dict[str, Any], error: str) -> None:
    assert any(error in e for e in SshConnector.validate_config(config(**overrides)))


def test_key_type_in_text_must_match_the_key_data() -> None:
    blob = PUBLIC.split()[1]
    with pytest.raises(ValueError, match="says ecdsa-sha2-nistp256 but its data is a ssh-ed25519"):
        PinnedKey.parse(f"ecdsa-sha2-nistp256 {blob}")


@pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="ssh-keygen is absent")
def test_fingerprint_is_the_one_ssh_keygen_prints(tmp_path: Path) -> None:
    (tmp_path / "key.pub").write_text(PUBLIC + " comment\n")
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp_path / "key.pub")],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert PinnedKey.parse(PUBLIC + " comment").fingerprint == out.split()[1]


def test_private_key_from_text_or_file(tmp_path: Path) -> None:
    private, public = new_ed25519()
    assert load_private_key(private_key=private).get_base64() == public.split()[1]
    (tmp_path / "id").write_text(private)
    assert load_private_key(key_file=str(tmp_path / "id")).get_base64() == public.split()[1]
    with pytest.raises(AgentError, match="cannot read SSH key file") as missing:
        load_private_key(key_file=str(tmp_path / "nope"))
    assert missing.value.permanent is True


def test_discover_script_quotes_every_word_of_the_command() -> None:
    script = ssh_scripts.discover_script("sudo -n '/opt/nv idia/nvidia-smi'")
    assert "set -- sudo -n '/opt/nv idia/nvidia-smi'\n" in script
    assert "--query-gpu=index,uuid,name,memory.total," in script
    assert script.count("@@gpupool section") == 5  # versions, query-gpu, -L, compute-apps, topo -m


def test_sh_quoting_survives_a_real_shell(tmp_path: Path) -> None:
    canary = tmp_path / "canary"  # a harmless command would create it if quoting broke
    nasty = ["$(id)", "a'b", 'c"d', "e\nf", f"; touch {canary}", "\\", "", f"$(touch {canary})"]
    wrapper = ssh_scripts.wrapper_script(["printf", "<%s>", *nasty], {"V": "$HOME'"}, ["GPU-1"])
    (tmp_path / "run.sh").write_text(wrapper)
    result = subprocess.run(["/bin/sh", str(tmp_path / "run.sh"), str(tmp_path)],
                            capture_output=True, text=True, timeout=10)  # fmt: skip
    assert result.stdout == "".join(f"<{a}>" for a in nasty)
    assert (tmp_path / "exit").read_text() == "0\n"
    assert not canary.exists()
    pid, start = (tmp_path / "started").read_text().split()
    assert int(pid) > 0 and int(start) > 0


def test_state_dir_expression_keeps_home_expandable() -> None:
    assert ssh_scripts.state_dir_expr("~/.gpupool") == '"$HOME"/.gpupool'
    assert ssh_scripts.state_dir_expr("/var/lib/gp u") == "'/var/lib/gp u'"


def test_exit_reasons_read_like_a_shell_reports_them() -> None:
    assert ssh_scripts.exit_reason(1) == "exited with code 1"
    assert ssh_scripts.exit_reason(137) == "killed by signal 9 (exit code 137)"


@pytest.mark.parametrize("handle", [{}, {"address": "10.0.0.5", "port": 22}, {"address": "10.0.0.5", "pid": "x"}])
def test_a_handle_that_is_not_ours_is_a_permanent_error(handle: dict[str, Any]) -> None:
    connector = SshConnector("lab", config(private_key=new_ed25519()[0], key_file=None))
    with pytest.raises(AgentError, match="not an ssh binding handle") as error:
        connector.observe(handle)
    assert error.value.permanent is True
    with pytest.raises(AgentError, match="not an ssh binding handle"):
        connector.unbind(handle, grace_s=1)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "pod", "pod": {}}, "bind only"),
        ({"kind": "process", "command": "python train.py"}, "non-empty list of strings"),
        ({"kind": "process", "command": []}, "non-empty list of strings"),
        ({"kind": "process", "command": ["x"], "env": {"A-B": "1"}}, "not a valid variable name"),
        ({"kind": "process", "command": ["x"], "env": {"A": 1}}, "must be a string"),
    ],
)
def test_bad_specs_are_permanent_errors(spec: dict[str, Any], message: str) -> None:
    connector = SshConnector("lab", config())
    with pytest.raises(AgentError, match=message) as error:
        connector.bind(BindRequest("lease-x", "gpu-a", "10.0.0.5", ("GPU-1",), spec))
    assert error.value.permanent is True


def test_lease_id_and_host_must_be_known_and_safe() -> None:
    connector = SshConnector("lab", config())
    with pytest.raises(AgentError, match="not usable as a directory name") as bad_id:
        connector.bind(
            BindRequest("../../etc", "10.0.0.5", "10.0.0.5", ("GPU-1",), {"kind": "process", "command": ["true"]})
        )
    assert bad_id.value.permanent is True
    elsewhere = BindRequest("lease-y", "gpu-zz", "10.9.9.9", ("GPU-1",), {"kind": "process", "command": ["true"]})
    with pytest.raises(AgentError, match="is not in source") as unknown:
        connector.bind(elsewhere)
    assert unknown.value.permanent is True


def test_timeouts_are_the_base_connectors_set_by_the_entry() -> None:
    default = SshConnector("lab", config())
    assert (default.connect_timeout_s, default.request_timeout_s) == (10.0, 30.0)
    assert (default.retry_budget_s, default.retry_delays) == (15.0, (0.5, 1.0, 2.0))
    tuned = SshConnector("lab", config(connect_timeout=2, command_timeout=5))
    assert (tuned.connect_timeout_s, tuned.request_timeout_s) == (2.0, 5.0)
