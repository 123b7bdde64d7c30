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
  `output.log` stdout and stderr of the command (read back by `logs_script`);
  `cancelled`  written by a stop that found no `started` (a bind that failed or was abandoned):
               a bind that comes later refuses to claim, a wrapper that comes later exits
               before the command. Each side writes its own file first and then looks for the
               other's, so one of them always sees the other: nothing starts after a stop.

A lease bound again after a requeue uses `<lease id>-<generation>` as its directory name
(`BindRequest.binding_id`), apart from the first binding, which may still be being stopped.

Waits are measured on the host's clock (`/proc/uptime`, monotonic, in centiseconds), never in
loop turns: each turn lists /proc, which takes its own time on a busy host (a grace of 10 s
counted as 200 turns of 50 ms took 42 s there).
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


# The host's monotonic clock in centiseconds, without forking (`t`). /proc/uptime always has two
# decimals; "1$frac - 100" keeps a leading zero from reading as octal.
_CLOCK_FUNCTION = """\
clock() { read -r up _ < /proc/uptime; t=$(( ${up%.*} * 100 + 1${up#*.} - 100 )); }
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
    """One round trip: versions, query-gpu CSV, `-L`, compute-apps and `topo -m`, in marked sections
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
        (report.SECTION_TOPO, "topo -m"),
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
# A stop that came first (it writes `cancelled`, then reads `started`) found nothing to stop.
[ -e "$d/cancelled" ] && exit 0
# Catching TERM keeps this wrapper alive until the command has ended, so that its exit status
# is recorded; the command itself starts with the default TERM behaviour (traps reset on exec).
trap 'stopping=1' TERM INT HUP
@EXPORTS@
@COMMAND@
code=$?; printf '%s\\n' "$code" > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit"
"""
)

_BIND = (
    """\
umask 077
d=@STATE@/leases/@LEASE@
mkdir -p "$d" || { echo "@MARK@ error cannot create $d"; exit 0; }
command -v setsid >/dev/null 2>&1 || { echo "@MARK@ error setsid not found on the host"; exit 0; }
[ -e "$d/cancelled" ] && { echo "@MARK@ cancelled"; exit 0; }
if mkdir "$d/claimed" 2>/dev/null; then
  printf '%s' @WRAPPER@ > "$d/run.sh"
  setsid /bin/sh "$d/run.sh" "$d" </dev/null >>"$d/output.log" 2>&1 &
fi
"""
    + _CLOCK_FUNCTION
    + """\
clock; end=$((t + @WAIT@ * 100))
while [ ! -s "$d/started" ] && [ "$t" -lt "$end" ]; do
  sleep 0.05 2>/dev/null || sleep 1; clock
done
echo "@MARK@ dir $d"
[ -s "$d/started" ] && echo "@MARK@ started $(cat "$d/started")"
[ -f "$d/exit" ] && echo "@MARK@ exit $(cat "$d/exit")"
exit 0
"""
)


def bind_script(state_dir: str, lease_id: str, wrapper: str, wait_s: int = 10) -> str:
    """Start the wrapper detached in its own session unless this lease was already claimed,
    then report `dir`, `started PID START` and, if already over, `exit CODE`. A second bind of
    the same lease only reads (mkdir of `claimed` is atomic, so racing retries are safe too)."""
    return _fill(
        _BIND,
        STATE=state_dir_expr(state_dir),
        LEASE=shlex.quote(check_lease_id(lease_id)),
        WRAPPER=shlex.quote(wrapper),
        WAIT=str(int(wait_s)),
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


# The stop itself, once `pid`, `start` and `grace` are set: TERM the session, wait up to `grace`
# seconds on the host's clock for it to end (looking every 0.1 s, so an early end is seen at
# once), KILL what is left, for at most 5 s more.
_STOP = (
    _STAT_FUNCTIONS
    + _CLOCK_FUNCTION
    + """\
members() { # live processes of the lease's session and of its shells' (zombies are already dead)
  for f in /proc/[0-9]*/stat; do
    p=${f#/proc/}; p=${p%/stat}
    proc_stat "$p" || continue
    [ "$st_state" != Z ] || continue
    case " $pid $shells " in *" $st_session "*) printf '%s ' "$p";; esac
  done
}
if proc_stat "$pid" && [ "$st_start" != "$start" ]; then
  pid=-1  # pid reused by another process: nothing of the workload is left (its shells may be)
fi
m=$(members); [ -n "$m" ] && kill -TERM $m 2>/dev/null
clock; t0=$t; end=$((t + grace * 100))  # the notice runs from the TERM
while [ -n "$m" ] && [ "$t" -lt "$end" ]; do
  sleep 0.1 2>/dev/null || sleep 1; m=$(members); clock
done
[ -n "$m" ] && echo "@MARK@ killed after $((t - t0)) cs"
end=$((t + 500))
while [ -n "$m" ] && [ "$t" -lt "$end" ]; do
  kill -KILL $m 2>/dev/null; sleep 0.05 2>/dev/null || sleep 1; m=$(members); clock
done
[ -n "$m" ] && echo "@MARK@ survivors $m"
clock; echo "@MARK@ waited $((t - t0)) cs"
echo "@MARK@ stopped"
"""
)

_UNBIND = """\
pid=@PID@; start=@START@; grace=@GRACE@; shells=
@PRELUDE@
""" + _STOP


def unbind_script(pid: int, start_time: str, grace_s: int, *, prelude: str = "") -> str:
    """TERM every live process of the lease's session, wait up to `grace_s` seconds (the host's
    clock), then KILL the rest. Only when the session leader is gone or still the same process
    (start time), so a reused pid is never signalled (Linux keeps a session id from reuse while
    members live). Reports `killed after N cs` when KILL was needed, `survivors PIDS` if any
    outlived it, `waited N cs`, then `stopped`. `prelude` (sh, run first) may add login sessions
    to stop with it to `shells` (agents.ssh_shells.end_prelude); a pid of -1: only those."""
    return _fill(_UNBIND, PID=str(int(pid)), START=shlex.quote(start_time), GRACE=str(int(grace_s)), PRELUDE=prelude)


_CANCEL = """\
umask 077
d=@STATE@/leases/@LEASE@; grace=@GRACE@; shells=
mkdir -p "$d" && : > "$d/cancelled" || { echo "@MARK@ error cannot write $d/cancelled"; exit 0; }
[ -s "$d/started" ] || { echo "@MARK@ stopped"; exit 0; }
read -r pid start < "$d/started"
""" + _STOP


def cancel_script(state_dir: str, binding_id: str, grace_s: int) -> str:
    """Stop a binding known only by its name (a bind that failed or was abandoned): mark it
    `cancelled` (no bind or wrapper starts the command after this), then stop its session as
    `unbind_script` does if it had started."""
    return _fill(_CANCEL, STATE=state_dir_expr(state_dir), LEASE=shlex.quote(check_lease_id(binding_id)),
                 GRACE=str(int(grace_s)))


#: Log windows are read in blocks of this many bytes (`dd bs=`): a window's start is a multiple.
LOG_BLOCK = 65536

# A lease's log from byte `from` on, through one file descriptor (fd 3) opened once: `dd` copies
# the window exactly (whole blocks, then the rest), which leaves fd 3 where the window ended, and
# each `cat <&3` of the follow loop copies what was written since, from where the last one
# stopped, with no byte counted twice or missed (the offset is the descriptor's, shared by every
# command reading it). A window starts at a multiple of LOG_BLOCK no later than `window` bytes
# before the end (with window >= LOG_BLOCK a window that does not start at 0 holds at least one
# whole block, so the skip always happens in the first `dd`). The follow loop looks every 0.1 s
# and ends once the wrapper has written `exit` (or its process is gone), after a last copy; once a
# second it writes a byte to stderr, which kills it (SIGPIPE, or the failed write) when the reader
# has gone away, so a loop whose client left never outlives it by more than that.
_LOGS = (
    """\
d=@DIR@; pid=@PID@; start=@START@; window=@WINDOW@; follow=@FOLLOW@; f="$d/output.log"
"""
    + _STAT_FUNCTIONS
    + """\
[ -f "$f" ] && [ -r "$f" ] || { echo "@MARK@ nolog"; exit 0; }
exec 3< "$f"
set -- $(wc -c < "$f"); size=$1
if [ "$window" -lt 0 ] || [ "$window" -ge "$size" ]; then from=0
else from=$(( (size - window) / @BLOCK@ * @BLOCK@ )); fi
n=$((size - from)); rest=$((n % @BLOCK@))
echo "@MARK@ window $from $n"
[ "$n" -ge @BLOCK@ ] && dd bs=@BLOCK@ skip=$((from / @BLOCK@)) count=$((n / @BLOCK@)) <&3 2>/dev/null
[ "$rest" -gt 0 ] && dd bs="$rest" count=1 <&3 2>/dev/null
[ "$follow" = 1 ] || exit 0
beat=0
while :; do
  over=0
  if [ -f "$d/exit" ]; then over=1
  elif ! { proc_stat "$pid" && [ "$st_start" = "$start" ] && [ "$st_state" != Z ]; }; then over=1; fi
  cat <&3 || exit 1
  [ "$over" = 1 ] && exit 0
  beat=$((beat + 1))
  if [ "$beat" -ge 10 ]; then beat=0; printf . >&2 || exit 1; fi
  sleep 0.1 2>/dev/null || sleep 1
done
"""
)


def logs_script(lease_dir: str, pid: int, start_time: str, *, window: int, follow: bool) -> str:
    """Print `window FROM N`, then exactly N bytes of the lease's `output.log` from byte FROM (the
    last `window` bytes or a little more; all of it for a negative `window`), then, with
    `follow`, what the workload writes after, until it has ended: then exit 0 (exit 1: the reader
    went away). Prints `nolog` instead when the log is not there."""
    if 0 <= window < LOG_BLOCK:
        raise ValueError(f"a log window is at least {LOG_BLOCK} bytes")
    return _fill(_LOGS, DIR=shlex.quote(lease_dir), PID=str(int(pid)), START=shlex.quote(start_time),
                 WINDOW=str(int(window)), FOLLOW="1" if follow else "0", BLOCK=str(LOG_BLOCK))


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
