"""The POSIX sh scripts the SSH agent runs on hosts, and the readers of what they print.

Each script is sent on stdin to `/bin/sh -s` (see `SshSession.run`); every value that comes from
configuration or from a user (argv, env, lease ids, paths) is embedded with `shlex.quote`, which
yields one single-quoted sh word whatever the value holds (`;`, `$()`, quotes, newlines). Env
names are checked against the POSIX name grammar before use. Nothing here does I/O.

Lease state on a host lives in `<state_dir>/leases/<lease id>/`:
  `claimed/`   created with mkdir (atomic): the first bind owns the lease, a retry only reads;
  `run.sh`     the wrapper: records `started`, runs the command, records `exit`;
  `started`    "<pid> <start time>" of the wrapper, which is the session leader (setsid), so
               its pid is also the session id of the whole process tree; the start time is
               field 22 of /proc/<pid>/stat, to tell our process from a later one given its pid;
  `exit`       the command's exit status (128+N when killed by signal N);
  `output.log` stdout and stderr of the command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from agents.nvidia_smi import report
from agents.nvidia_smi.csv import QUERY_COMPUTE_APPS_FIELDS, QUERY_GPU_FIELDS

MARK = report.REPORT_MARK
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SLOT = re.compile(r"@([A-Z]+)@")

# Field 22 of /proc/PID/stat, read without forking: drop everything up to the last ") " (the
# command name may hold spaces and parentheses); then state is $1 and start time is ${20}.
_STAT_FUNCTIONS = """\
proc_stat() { # PID -> sets st_state st_session st_start; fails if PID is gone
  st_state=; st_session=; st_start=
  read -r st_line 2>/dev/null < "/proc/$1/stat" || return 1
  set -- ${st_line##*) }
  [ $# -ge 20 ] || return 1
  st_state=$1; st_session=$4; shift 19; st_start=$1
}
"""


def state_dir_expr(state_dir: str) -> str:
    """A sh expression for the state directory: `~/x` becomes `"$HOME"/'x'`, others quoted."""
    if state_dir == "~":
        return '"$HOME"'
    if state_dir.startswith("~/"):
        return '"$HOME"/' + shlex.quote(state_dir[2:])
    return shlex.quote(state_dir)


def check_lease_id(lease_id: str) -> str:
    if not _LEASE_ID.match(lease_id or ""):
        raise ValueError(f"lease id {lease_id!r} is not usable as a directory name")
    return lease_id


def discover_script(nvidia_smi_command: str) -> str:
    """One round trip: versions, query-gpu CSV, `-L` and compute-apps, in marked sections
    (`nvidia_smi.report.read_host_report` reads them). `nvidia_smi_command` may be several words
    (`sudo -n nvidia-smi`); each is quoted."""
    words = " ".join(shlex.quote(w) for w in shlex.split(nvidia_smi_command)) or "nvidia-smi"
    query_gpu = ",".join(QUERY_GPU_FIELDS)
    apps = ",".join(QUERY_COMPUTE_APPS_FIELDS)
    sections = [
        (report.SECTION_VERSIONS, "-q -d COMPUTE"),
        (report.SECTION_QUERY_GPU, f"--query-gpu={query_gpu} --format=csv,noheader,nounits"),
        (report.SECTION_LIST, "-L"),
        (
            report.SECTION_COMPUTE_APPS,
            f"--query-compute-apps={apps} --format=csv,noheader,nounits",
        ),
    ]
    lines = [
        f"set -- {words}",
        # Non-login sessions often lack the driver's directory on PATH.
        'PATH="$PATH:/usr/bin:/usr/local/bin:/usr/local/nvidia/bin"; export PATH',
        f'command -v "$1" >/dev/null 2>&1 || {{ echo "{MARK} missing $1"; exit 0; }}',
    ]
    for name, args in sections:
        lines.append(f'echo "{MARK} section {name}"; "$@" {args} 2>&1; echo "{MARK} rc $?"')
    return "\n".join(lines) + "\n"


def _fill(template: str, **values: str) -> str:
    """Put already-quoted values into a script template's `@NAME@` slots, in one pass: text
    inside a value (a user's argv may say `@DIR@`) is never substituted again."""
    values = {"MARK": MARK, **values}
    return _SLOT.sub(lambda slot: values[slot.group(1)], template)


def wrapper_script(command: Sequence[str], env: Mapping[str, str], gpu_uuids: Sequence[str]) -> str:
    """The per-lease `run.sh` (its $1 is the lease dir). Raises ValueError for an unusable
    command or env. Our CUDA_VISIBLE_DEVICES is exported last, so the lease's GPUs win."""
    if not command or not all(isinstance(a, str) for a in command):
        raise ValueError("binding command must be a non-empty list of strings")
    if any("\0" in a for a in command):
        raise ValueError("binding command arguments may not contain NUL bytes")
    exports = []
    for name, value in {**env, "CUDA_VISIBLE_DEVICES": ",".join(gpu_uuids)}.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValueError(f"binding env name {name!r} is not a valid variable name")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"binding env value of {name} must be a string without NUL bytes")
        exports.append(f"{name}={shlex.quote(value)}; export {name}")
    return _fill(
        _WRAPPER,
        EXPORTS="\n".join(exports),
        COMMAND=" ".join(shlex.quote(a) for a in command),
    )


_WRAPPER = (
    """\
d=$1; cd "$HOME" 2>/dev/null || cd /
"""
    + _STAT_FUNCTIONS
    + """\
proc_stat $$; printf '%s %s\\n' $$ "$st_start" > "$d/started.tmp"; mv "$d/started.tmp" "$d/started"
# Catching TERM keeps this wrapper alive until the command has ended, so that its exit status
# is recorded; the command itself starts with the default TERM behaviour (traps reset on exec).
trap 'stopping=1' TERM INT HUP
@EXPORTS@
@COMMAND@
code=$?; printf '%s\\n' "$code" > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit"
"""
)

_BIND = """\
umask 077
d=@STATE@/leases/@LEASE@
mkdir -p "$d" || { echo "@MARK@ error cannot create $d"; exit 0; }
command -v setsid >/dev/null 2>&1 || { echo "@MARK@ error setsid not found on the host"; exit 0; }
if mkdir "$d/claimed" 2>/dev/null; then
  printf '%s' @WRAPPER@ > "$d/run.sh"
  setsid /bin/sh "$d/run.sh" "$d" </dev/null >>"$d/output.log" 2>&1 &
fi
i=0
while [ ! -s "$d/started" ] && [ "$i" -lt @TICKS@ ]; do
  sleep 0.05 2>/dev/null || sleep 1; i=$((i+1))
done
echo "@MARK@ dir $d"
[ -s "$d/started" ] && echo "@MARK@ started $(cat "$d/started")"
[ -f "$d/exit" ] && echo "@MARK@ exit $(cat "$d/exit")"
exit 0
"""


def bind_script(state_dir: str, lease_id: str, wrapper: str, wait_s: int = 10) -> str:
    """Start the wrapper detached in its own session unless this lease was already claimed,
    then report `dir`, `started PID START` and, if already over, `exit CODE`. A second bind of
    the same lease only reads (mkdir of `claimed` is atomic, so racing retries are safe too)."""
    return _fill(
        _BIND,
        STATE=state_dir_expr(state_dir),
        LEASE=shlex.quote(check_lease_id(lease_id)),
        WRAPPER=shlex.quote(wrapper),
        TICKS=str(wait_s * 20),
    )


_OBSERVE = (
    """\
d=@DIR@; pid=@PID@; start=@START@
"""
    + _STAT_FUNCTIONS
    + """\
[ -f "$d/exit" ] && { echo "@MARK@ exit $(cat "$d/exit")"; exit 0; }
if proc_stat "$pid" && [ "$st_start" = "$start" ] && [ "$st_state" != Z ]; then
  echo "@MARK@ running"; exit 0
fi
# It may have ended between the two looks.
[ -f "$d/exit" ] && { echo "@MARK@ exit $(cat "$d/exit")"; exit 0; }
[ -d "$d" ] || echo "@MARK@ nodir"
echo "@MARK@ gone"
"""
)


def observe_script(lease_dir: str, pid: int, start_time: str) -> str:
    """Report `exit CODE`, `running` (pid alive with the recorded start time) or `gone`."""
    return _fill(_OBSERVE, DIR=shlex.quote(lease_dir), PID=str(int(pid)), START=shlex.quote(start_time))


_UNBIND = (
    """\
pid=@PID@; start=@START@; grace=@GRACE@
"""
    + _STAT_FUNCTIONS
    + """\
members() { # live processes of the lease's session (zombies are already dead)
  for f in /proc/[0-9]*/stat; do
    p=${f#/proc/}; p=${p%/stat}
    proc_stat "$p" || continue
    if [ "$st_session" = "$pid" ] && [ "$st_state" != Z ]; then printf '%s ' "$p"; fi
  done
}
if proc_stat "$pid" && [ "$st_start" != "$start" ]; then
  echo "@MARK@ stopped"; exit 0  # pid reused by another process: nothing of ours is left
fi
m=$(members); [ -n "$m" ] && kill -TERM $m 2>/dev/null
i=0
while [ -n "$m" ] && [ "$i" -lt $((grace * 20)) ]; do
  sleep 0.05 2>/dev/null || sleep 1; i=$((i+1)); m=$(members)
done
i=0
while [ -n "$m" ] && [ "$i" -lt 100 ]; do
  kill -KILL $m 2>/dev/null; sleep 0.05 2>/dev/null || sleep 1; i=$((i+1)); m=$(members)
done
[ -n "$m" ] && echo "@MARK@ survivors $m"
echo "@MARK@ stopped"
"""
)


def unbind_script(pid: int, start_time: str, grace_s: int) -> str:
    """TERM every live process of the lease's session, wait up to `grace_s`, then KILL the
    rest. Only when the session leader is gone or still the same process (start time), so a
    reused pid is never signalled (Linux keeps a session id from reuse while members live).
    Reports `survivors PIDS` if any outlived KILL, then `stopped`."""
    return _fill(_UNBIND, PID=str(int(pid)), START=shlex.quote(start_time), GRACE=str(int(grace_s)))


def read_marks(text: str) -> dict[str, str]:
    """`{verb: rest of line}` for every `@@gpupool VERB ...` line (the last one wins)."""
    marks: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(MARK + " "):
            verb, _, rest = line[len(MARK) + 1 :].partition(" ")
            marks[verb] = rest.strip()
    return marks


def exit_reason(code: int) -> str:
    """`exited with code 3`, or `killed by signal 9 (exit code 137)` for shell-style codes."""
    if code > 128 and code - 128 < 65:
        return f"killed by signal {code - 128} (exit code {code})"
    return f"exited with code {code}"
