"""Shells on a lease's host: the POSIX sh scripts that authorise a user's key for a lease, the
login wrapper that key is forced through, and the end of both when the lease ends.

A user's ssh client logs in as the source's `user` with a key gpupool wrote into that account's
`authorized_keys` for this lease only. The line is

    restrict,pty[,port-forwarding],command="/bin/sh '<lease dir>/shell.sh'" ssh-ed25519 AAAA… gpupool:<lease>:<key>

`restrict` turns off agent and X11 forwarding (and port forwarding, unless the source allows
it), so the key can do nothing but start the forced command. `shell.sh` (written by the same
script that adds the key) refuses once the lease has ended, records its login session in
`<lease dir>/shells/<sid>` ("<sid> <start time of the session leader>"), exports
CUDA_VISIBLE_DEVICES (the lease's GPUs) and GPUPOOL_LEASE_ID, and then runs the user's login shell,
or the command the user gave (`ssh host cmd`: SSH_ORIGINAL_COMMAND). A forced command is used
rather than `environment=` because that option needs `PermitUserEnvironment` in sshd_config,
which few hosts set.

The lease's end (`agents.ssh_scripts.unbind_script` with `end_prelude`) writes `revoked` first,
takes every line of the lease out of `authorized_keys`, then ends the recorded login sessions
with the workload (TERM, the grace, KILL). The wrapper records its session first and then looks
for `revoked`, so one side always sees the other: no shell of an ended lease outlives its end.
Adding a key looks for `revoked` under the same lock the removal holds, so a key added while the
lease ends is either refused or removed.

`authorized_keys` is edited under a lock (a directory beside it, `mkdir` being atomic) and
replaced whole (`mv` of a complete copy), so two leases' edits never interleave and a failed
write never leaves half a file: gpupool's own key usually lives in the same file. A lock whose
holder died is broken after 10 s (every holder keeps it for milliseconds).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from agents.ssh_scripts import _CLOCK_FUNCTION, _STAT_FUNCTIONS, MARK, _fill, check_lease_id, state_dir_expr
from agents.ssh_session import PinnedKey

#: The comment that names a key line as gpupool's: `gpupool:<binding id>:<key id>`.
COMMENT_PREFIX = "gpupool:"
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def key_comment(binding_id: str, key_id: str = "") -> str:
    """The comment of a key line (with `key_id`), or the prefix every line of the binding shares."""
    check_lease_id(binding_id)
    if key_id and not _KEY_ID.match(key_id):
        raise ValueError(f"key id {key_id!r} is not usable in a key comment")
    return f"{COMMENT_PREFIX}{binding_id}:{key_id}"


def key_line(public_key: str, *, lease_dir: str, binding_id: str, key_id: str, port_forwarding: bool) -> str:
    """The `authorized_keys` line for a user's public key (`ssh-ed25519 AAAA… [comment]`; the
    comment is dropped). Raises ValueError for a key that is not a usable OpenSSH public key."""
    pinned = PinnedKey.parse(public_key)
    encoded = public_key.split()[1]
    command = f"/bin/sh {shlex.quote(lease_dir + '/shell.sh')}"
    if any(c in command for c in '"\\\n\r'):  # would need escaping inside command="…"
        raise ValueError(f"the lease directory {lease_dir!r} cannot be named in an authorized_keys line")
    options = "restrict,pty" + (",port-forwarding" if port_forwarding else "")
    return f'{options},command="{command}" {pinned.key_type} {encoded} {key_comment(binding_id, key_id)}'


_WRAPPER = (
    """\
d=@DIR@
"""
    + _STAT_FUNCTIONS
    + """\
ended() { echo "gpupool: lease @LEASE@ has ended; its shells are closed" >&2; exit 1; }
[ -e "$d/revoked" ] && ended
# Record this login's session before looking for `revoked` (the lease's end writes that first,
# then reads the records): either the end sees this shell, or this shell sees the end.
proc_stat $$ && s=$st_session && proc_stat "$s" && mkdir -p "$d/shells" \\
  && printf '%s %s\\n' "$s" "$st_start" > "$d/shells/$s" \\
  || { echo "gpupool: cannot record this shell on the host" >&2; exit 1; }
[ -e "$d/revoked" ] && ended
@EXPORTS@
cd "$HOME" 2>/dev/null || cd /
[ -n "$SSH_ORIGINAL_COMMAND" ] && exec "${SHELL:-/bin/sh}" -c "$SSH_ORIGINAL_COMMAND"
exec "${SHELL:-/bin/sh}" -l
"""
)


def wrapper_script(lease_dir: str, lease_id: str, gpu_uuids: Sequence[str]) -> str:
    """`shell.sh`: the forced command of every key of the lease (see the module)."""
    exports = []
    for name, value in {"GPUPOOL_LEASE_ID": lease_id, "CUDA_VISIBLE_DEVICES": ",".join(gpu_uuids)}.items():
        if not _ENV_NAME.match(name) or "\0" in value:
            raise ValueError(f"cannot export {name!r} in a shell")
        exports.append(f"{name}={shlex.quote(value)}; export {name}")
    return _fill(_WRAPPER, DIR=shlex.quote(lease_dir), LEASE=shlex.quote(lease_id), EXPORTS="\n".join(exports))


# Take the lock on authorized_keys (`ak`): see the module. Released when the script exits.
_LOCK = (
    _CLOCK_FUNCTION
    + """\
lock="$ak.gpupool-lock"; clock; end=$((t + 1000))
until mkdir "$lock" 2>/dev/null; do
  clock; if [ "$t" -ge "$end" ]; then rmdir "$lock" 2>/dev/null; end=$((t + 1000)); fi
  sleep 0.05 2>/dev/null || sleep 1
done
trap 'rmdir "$lock" 2>/dev/null' EXIT
"""
)

# Drop the lines whose last field is the comment `c` (exact=1) or starts with it (exact=0); the
# file is only rewritten when one of them is there.
_DROP = """\
if [ -f "$ak" ] && grep -q -F -- "$c" "$ak"; then
  awk -v c="$c" -v exact="$exact" '{ if (exact ? $NF != c : index($NF, c) != 1) print }' "$ak" > "$ak.gpupool-tmp" \\
    && mv -f "$ak.gpupool-tmp" "$ak" || { echo "@MARK@ error cannot rewrite $ak"; exit 0; }
fi
"""

_AUTHORIZE = (
    """\
umask 077
d=@DIR@; ak=@KEYS@; line=@LINE@
[ -d "$d" ] || { echo "@MARK@ error the lease's directory $d is missing on the host"; exit 0; }
printf '%s' @WRAPPER@ > "$d/shell.sh.tmp" && mv -f "$d/shell.sh.tmp" "$d/shell.sh" \\
  || { echo "@MARK@ error cannot write $d/shell.sh"; exit 0; }
mkdir -p "${ak%/*}" 2>/dev/null
"""
    + _LOCK
    + """\
[ -e "$d/revoked" ] && { echo "@MARK@ revoked"; exit 0; }
# A last line without its newline would run into ours.
if [ -s "$ak" ] && [ -n "$(tail -c 1 "$ak")" ]; then echo >> "$ak"; fi
if ! grep -q -x -F -- "$line" "$ak" 2>/dev/null; then
  printf '%s\\n' "$line" >> "$ak" || { echo "@MARK@ error cannot write $ak"; exit 0; }
fi
echo "@MARK@ authorized"
"""
)


def authorize_script(*, lease_dir: str, authorized_keys: str, line: str, wrapper: str) -> str:
    """(Re)write the lease's `shell.sh` and add `line` to `authorized_keys` (once), unless the
    lease has ended. Prints `authorized`, `revoked` (it ended) or `error WHY`."""
    return _fill(_AUTHORIZE, DIR=shlex.quote(lease_dir), KEYS=state_dir_expr(authorized_keys),
                 LINE=shlex.quote(line), WRAPPER=shlex.quote(wrapper))


_REVOKE = (
    """\
umask 077
ak=@KEYS@; c=@COMMENT@; exact=1
"""
    + _LOCK
    + _DROP
    + """\
echo "@MARK@ revoked"
"""
)


def revoke_script(*, authorized_keys: str, binding_id: str, key_id: str) -> str:
    """Take one key of the lease out of `authorized_keys` (its shells go on: the user's other
    logins to the same lease may still be open). Prints `revoked` or `error WHY`."""
    return _fill(_REVOKE, KEYS=state_dir_expr(authorized_keys), COMMENT=shlex.quote(key_comment(binding_id, key_id)))


_END = (
    """\
d=@DIR@; ak=@KEYS@; c=@COMMENT@; exact=0
{ mkdir -p "$d" && : > "$d/revoked"; } 2>/dev/null || { echo "@MARK@ error cannot write $d/revoked"; exit 0; }
(
"""
    + _LOCK
    + _DROP
    + """\
)
for f in "$d"/shells/*; do
  [ -f "$f" ] || continue
  read -r s s_start < "$f" || continue
  # A session whose leader's pid now names another process is over (Linux keeps a session id
  # from reuse while any member lives).
  if proc_stat "$s" && [ "$st_start" != "$s_start" ]; then continue; fi
  shells="$shells $s"
done
"""
)


def end_prelude(*, lease_dir: str, authorized_keys: str, binding_id: str) -> str:
    """The start of the lease's stop script (`agents.ssh_scripts.unbind_script`): `revoked`
    written, every key of the lease taken out, and `shells` set to the login sessions to stop
    with the workload. Prints `error WHY` and stops when the keys cannot be taken out."""
    return _fill(_END, DIR=shlex.quote(lease_dir), KEYS=state_dir_expr(authorized_keys),
                 COMMENT=shlex.quote(key_comment(binding_id)))


_SESSION_BIND = """\
umask 077
d=@STATE@/leases/@LEASE@
mkdir -p "$d" || { echo "@MARK@ error cannot create $d"; exit 0; }
[ -e "$d/cancelled" ] && { echo "@MARK@ cancelled"; exit 0; }
mkdir "$d/claimed" 2>/dev/null
echo "@MARK@ dir $d"
"""


def session_bind_script(state_dir: str, binding_id: str) -> str:
    """A session binding's start: its lease directory, where `shell.sh` and the shells' records
    will live. Prints `dir PATH` (absolute), `cancelled` or `error WHY`."""
    return _fill(_SESSION_BIND, STATE=state_dir_expr(state_dir), LEASE=shlex.quote(check_lease_id(binding_id)))


__all__ = ["COMMENT_PREFIX", "MARK", "authorize_script", "end_prelude", "key_comment", "key_line", "revoke_script",
           "session_bind_script", "wrapper_script"]
