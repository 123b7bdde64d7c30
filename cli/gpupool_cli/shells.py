"""Shells on leased GPUs: `gpupool ssh ID` (a VM lease: a process or session on an ssh host), and
`gpupool shell --gpus N` (request a session lease, wait, log in, release it when ssh exits).

`ssh` makes a key pair for this one login with the system's `ssh-keygen` (the private half stays in
a private temporary folder here and is deleted at the end), has the server authorise the public
half on the lease's host for the lease's life (`POST leases/{id}/ssh-keys/`), and runs the system
`ssh` with only that key, trusting only the host key the server names. When ssh exits, the key
is taken back (`DELETE leases/{id}/ssh-keys/{key}/`); the lease's end takes it back anyway, with
every shell it opened."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import click

from gpupool_cli.context import Ctx
from gpupool_cli.errors import CliError, Terminated, UsageError, stop_name
from gpupool_cli.leases import resolve_lease
from gpupool_cli.options import complete_leases, current, global_options, lease_request_options
from gpupool_cli.requesting import cancel, create_lease, request_body, wait_for_grant
from gpupool_cli.waiting import ENDED, Follower, StatusLine


def _tool(name: str, override: str | None = None) -> str:
    found = shutil.which(override or name)
    if found is None:
        raise UsageError(f"{override or name} not found: gpupool ssh runs the OpenSSH client (install openssh-client)",
                         code="no_ssh_client")
    return found


def _key_pair(folder: Path, lease_id: str) -> tuple[Path, str]:
    """A fresh ed25519 key pair in `folder`: (private key file, public key line)."""
    private = folder / "id_ed25519"
    made = subprocess.run([_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", f"gpupool-{lease_id[:8]}",
                           "-f", str(private)], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise CliError(f"ssh-keygen failed: {made.stderr.strip() or made.returncode}", code="ssh_keygen")
    return private, private.with_suffix(".pub").read_text().strip()


def ssh_argv(ssh: str, private: Path, login: dict[str, Any], known_hosts: Path, extra: tuple[str, ...]) -> list[str]:
    """The ssh command line: only our key (no agent's, no multiplexed connection that would skip
    it), the host key the server pinned, then the user's own arguments after the destination
    (OpenSSH reads options there too: `-L 8888:localhost:8888`, then a command)."""
    argv = [ssh, "-i", str(private), "-o", "IdentitiesOnly=yes", "-o", "ControlPath=none",
            "-p", str(login["port"]), "-l", str(login["user"])]
    if login.get("known_hosts"):
        known_hosts.write_text(str(login["known_hosts"]) + "\n")
        argv += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"]
    return [*argv, str(login["address"]), *extra]


def run_attached(argv: list[str]) -> int:
    """Run ssh on this terminal and return its exit code. Ctrl-C reaches ssh itself (the same
    process group): it decides, this process waits for it. SIGTERM ends ssh, then us."""
    process = subprocess.Popen(argv)
    while True:
        try:
            return process.wait()
        except KeyboardInterrupt:
            continue
        except Terminated:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
            raise


def open_shell(ctx: Ctx, lease_id: str, ssh_command: str | None, ssh_args: tuple[str, ...]) -> int:
    """Log in to a bound lease's host with a key made for this login; ssh's exit code."""
    if ssh_args[:1] == ("--",):  # Click keeps the `--` that follows the lease id: ssh would stop reading options
        ssh_args = ssh_args[1:]
    ssh = _tool("ssh", ssh_command)
    with tempfile.TemporaryDirectory(prefix="gpupool-ssh-") as folder:  # 0700: ours only
        private, public = _key_pair(Path(folder), lease_id)
        grant = ctx.client.post(f"leases/{lease_id}/ssh-keys/", {"public_key": public})
        try:
            return run_attached(ssh_argv(ssh, private, grant["login"], Path(folder) / "known_hosts", ssh_args))
        finally:
            with contextlib.suppress(CliError):  # the lease's end takes it back anyway
                ctx.client.request("DELETE", f"leases/{lease_id}/ssh-keys/{grant['id']}/", idempotent=True)


SSH_ARGS = click.argument("ssh_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SSH_ARGS...]")
SSH_OPTION = click.option("--ssh", "ssh_command", envvar="GPUPOOL_SSH", metavar="PROGRAM",
                          help="the ssh client to run (default: ssh)")
PASS_THROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False}


@click.command("ssh", context_settings=PASS_THROUGH)
@click.argument("lease_id", metavar="ID", shell_complete=complete_leases)
@SSH_ARGS
@SSH_OPTION
@global_options
def cmd_ssh(lease_id: str, ssh_args: tuple[str, ...], ssh_command: str | None) -> int:
    """A shell on a lease's GPUs (CUDA_VISIBLE_DEVICES set), for a bound lease on an ssh host: a
    session (`gpupool shell`) or a running process. Exits with ssh's exit code.

    \b
    gpupool ssh 5f0c                                     a login shell
    gpupool ssh 5f0c -- nvidia-smi                       one command
    gpupool ssh 5f0c -- -L 8888:localhost:8888           a shell, and a notebook's port here
    """
    ctx = current()
    return open_shell(ctx, resolve_lease(ctx, lease_id), ssh_command, ssh_args)


@click.command("shell", context_settings=PASS_THROUGH)
@lease_request_options
@click.option("--keep", is_flag=True, help="keep the lease when ssh exits (log in again with `gpupool ssh ID`)")
@SSH_OPTION
@SSH_ARGS
@global_options
def cmd_shell(keep: bool, ssh_command: str | None, ssh_args: tuple[str, ...], **opts: Any) -> int:
    """Request GPUs for a shell and log in: gpupool shell --gpus 1 [-- SSH_ARGS...]

    A session lease on an ssh host: nothing runs on it but your shells, and like any lease it is
    reclaimed when its GPUs sit idle (where the pool says so). It is released when ssh exits,
    unless --keep. Exits with ssh's exit code."""
    ctx = current()
    lease = create_lease(ctx, request_body(ctx, opts, {"kind": "session"}))
    ctx.note(f"requested lease {lease['id']}")
    lease = wait_for_grant(ctx, lease["id"], opts)
    try:
        lease = _until_bound(ctx, lease, opts["poll"])
        code = open_shell(ctx, lease["id"], ssh_command, ssh_args)
    except (KeyboardInterrupt, Terminated) as stop:
        cancel(ctx, lease["id"], stop_name(stop), lease, 0.0)
        raise
    if not keep:
        cancel(ctx, lease["id"], "ssh exited", lease, 0.0)
    return code


def _until_bound(ctx: Ctx, lease: dict[str, Any], poll_s: float) -> dict[str, Any]:
    """The granted session lease once bound (its directory made on the host: a second or so)."""
    if lease["state"] == "granted":
        follower = Follower(ctx, lease["id"], StatusLine(ctx), poll_s=poll_s)
        follower.last = lease
        lease = follower.until(lambda x: x["state"] == "bound" or x["state"] in ENDED)
    if lease["state"] != "bound":
        raise CliError(f"lease {lease['id']} {lease['state']}: {lease.get('reason') or ''}".rstrip(": "),
                       code=f"lease_{lease['state']}")
    return lease


COMMANDS = (cmd_ssh, cmd_shell)
