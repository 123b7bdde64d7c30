"""The connector interface every source kind implements, and the plain data it speaks.

Agents talk to the outside world (SSH hosts, Kubernetes API servers, the simulated fleet) and know
nothing of Django models: configuration comes in as plain mappings, discovered facts and binding
status go out as the frozen dataclasses below. `inventory.sync` turns facts into rows;
`allocation` turns binding status into lease transitions.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from agents.host_backoff import HostBackoff

# --- errors -------------------------------------------------------------------------------------


class AgentError(Exception):
    """A failure talking to a source.

    `permanent=True` means retrying cannot help (bad credentials, refused host key, invalid
    manifest); callers record it and stop. Transient errors are retried with backoff.
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


# --- discovered facts ---------------------------------------------------------------------------

HEALTH_OK = "ok"
HEALTH_UNHEALTHY = "unhealthy"

#: HostFact label carrying sentences about GPUs the host named but could not read (fell off the
#: bus, no UUID to list them by). Inventory marks such a host's vanished GPUs unhealthy, not gone.
GPU_ERRORS_LABEL = "gpupool.io/gpu-errors"

HOST_READY = "ready"
HOST_CORDONED = "cordoned"  # the source itself says: schedule nothing new here
HOST_OFFLINE = "offline"


@dataclass(frozen=True)
class GpuProcess:
    """A compute process seen on a GPU (nvidia-smi --query-compute-apps)."""

    pid: int | None
    used_memory_mb: int | None = None
    name: str = ""


@dataclass(frozen=True)
class GpuFact:
    """One GPU, or one MIG slice (then `parent_uuid` and `mig_profile` are set).

    Telemetry fields are None when the source could not read them (`[N/A]`, `[Not Supported]`).
    `processes` lists compute processes on it; inventory marks the GPU `foreign` when some run
    and no lease of ours holds it.
    """

    uuid: str
    index: int
    model: str
    memory_mb: int | None = None
    mig_profile: str = ""
    parent_uuid: str = ""
    health: str = HEALTH_OK
    health_reason: str = ""
    utilization_pct: float | None = None
    memory_used_mb: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    # Time-slicing: this many replicas of the physical GPU are advertised (Kubernetes' device
    # plugin, or an ssh host's `time_slicing`), each a GpuFact of its own.
    shared_replicas: int = 1
    # A replica's physical GPU, where the source knows which one it is (ssh: the GPU's or MIG
    # device's UUID); empty otherwise (Kubernetes: the device plugin picks it for each pod).
    physical_uuid: str = ""
    # The NVLink island it is in (GPUs joined by NVLink/NVSwitch): host-local (`nvl0`, from
    # `nvidia-smi topo -m`) or fleet-wide with a colon (`clique:ID`, Kubernetes' multi-node
    # NVLink label); "" in none or unknown.
    nvlink_island: str = ""


@dataclass(frozen=True)
class HostFact:
    """One machine as a source sees it right now.

    `foreign_gpus` is a count (Kubernetes: GPUs held by pods gpupool did not create; the device
    plugin, not us, picks which devices they got). `error` is a human sentence when the host could
    not be read; then `gpus` is empty and the host is shown offline with that error.
    """

    name: str
    address: str = ""
    state: str = HOST_READY
    driver_version: str = ""
    cuda_version: str = ""
    gpus: tuple[GpuFact, ...] = ()
    foreign_gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class Discovery:
    """Everything one discovery pass of one source found. `error` is set when the whole source
    failed (API server unreachable); per-host failures live on each HostFact instead.

    Telemetry read apart from the hosts (Kubernetes: DCGM metrics from Prometheus) says how it
    went: `telemetry_ok` when it was read this pass, `telemetry_error` (words) when it is
    configured but could not be read (then every GPU's telemetry is None); neither for a source
    without such telemetry."""

    hosts: tuple[HostFact, ...] = ()
    error: str = ""
    telemetry_ok: bool = False
    telemetry_error: str = ""


# --- binding ------------------------------------------------------------------------------------

BIND_STARTING = "starting"  # asked for, not yet running (pod Pending, process launching)
BIND_RUNNING = "running"
BIND_SUCCEEDED = "succeeded"  # ended on its own with success (exit 0, pod Succeeded)
BIND_FAILED = "failed"  # ended on its own with failure, or could never start
BIND_GONE = "gone"  # removed by someone else (pod deleted, process vanished without trace)

BIND_ENDED = frozenset({BIND_SUCCEEDED, BIND_FAILED, BIND_GONE})


@dataclass(frozen=True)
class BindRequest:
    """What a connector needs to start a lease's workload.

    `spec` is the user's binding object from the API (`{"kind": "process", ...}` or
    `{"kind": "pod", ...}`), already validated for shape. `generation` counts the lease's
    requeues: a lease bound again after a loss names its workload apart from the first one (pod
    name, lease directory), which may still be running on the lost host until it is stopped.
    """

    lease_id: str
    host_name: str
    host_address: str
    gpu_uuids: tuple[str, ...]
    spec: Mapping[str, Any]
    grace_s: int = 30
    generation: int = 0

    @property
    def binding_id(self) -> str:
        """The name of this binding on the host: the lease id, then `<lease id>-<generation>`."""
        return self.lease_id if not self.generation else f"{self.lease_id}-{self.generation}"


@dataclass(frozen=True)
class BindingStatus:
    """The live status of a bound workload. `handle` is what the connector needs to find it
    again (pid and start time, pod namespace/name); it is stored on the lease as JSON."""

    state: str
    handle: Mapping[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"handle": dict(self.handle)}


# --- workload output ----------------------------------------------------------------------------


class LogStream:
    """A workload's output (stdout and stderr as the workload wrote them), in chunks of bytes.

    Iterate it in one thread; `close()` may come from any other (a client that went away) and
    makes a blocked read return soon, after which iteration stops. `workload_ended` is True once
    the stream ran out because the workload itself ended (its exit recorded, its container gone):
    a follow that ends for that reason, so the caller may look at the workload's status at once.
    A stream that breaks (host unreachable mid-way) raises AgentError from `__next__`.

    Connectors subclass it: `chunks()` is the reader (a generator, which sets `workload_ended`
    before it returns), `interrupt()` what makes its blocked read return (close a session or an
    HTTP response), called once, by `close()`.
    """

    def __init__(self) -> None:
        self.closed = False
        self.workload_ended = False
        self._chunks: Iterator[bytes] | None = None

    def chunks(self) -> Iterator[bytes]:
        """The output, chunk by chunk, until it ends (or `closed` is set)."""
        return iter(())

    def interrupt(self) -> None:
        """Make a read blocked in `chunks` return; called from another thread."""

    def __iter__(self) -> LogStream:
        return self

    def __next__(self) -> bytes:
        if self.closed:
            raise StopIteration
        if self._chunks is None:
            self._chunks = self.chunks()
        try:
            return next(self._chunks)
        except StopIteration:
            raise
        except Exception:
            if self.closed:  # the read failed because close() pulled the connection from under it
                raise StopIteration from None
            raise

    def close(self) -> None:
        """End the stream, from any thread; idempotent."""
        if not self.closed:
            self.closed = True
            self.interrupt()


def last_lines(data: bytes, count: int) -> tuple[bytes, bool]:
    """The last `count` lines of `data` (a last line without its newline counts, as `tail` counts
    it), and whether `data` held that many; all of `data` when it held fewer."""
    if count <= 0:
        return b"", True
    cut = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(count):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return data, False
    return data[cut + 1 :], True


# --- the connector ------------------------------------------------------------------------------

T = TypeVar("T")


class RetryableError(AgentError):
    """A transient failure worth another attempt at once (HTTP 503, a connection the peer dropped).

    Raised inside an attempt of `Connector.retrying`, which retries it while the budget lasts. A
    transient failure that would only burn the budget (a refused port, a host that does not answer)
    is a plain `AgentError(permanent=False)`: the next discovery pass or task retry tries again.

    `retry_after` is how long the source asked us to wait before trying again (an HTTP 429's or
    503's `Retry-After`), in seconds; `retrying` never tries sooner.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, permanent=False)
        self.retry_after = retry_after


class Connector(ABC):
    """One source of GPUs. Subclasses declare their `kind` and implement the four verbs.

    A concrete subclass that sets `kind` in a module under `agents/` is a source kind: the registry
    (`agents.registry`) finds it there, so adding a kind is adding one module.

    `config` is the source's entry from the YAML configuration (minus `name`, `kind`, `pool`),
    with the `secret_fields` already decrypted by the caller. Every remote call is bounded by the
    timeouts below and raises AgentError on failure; `retrying` is the one place that retries.
    """

    #: The source kind in configuration and in `Source.kind` (a short slug, at most 16 characters).
    kind: ClassVar[str]
    #: The workload kinds `bind` can start on this kind's hosts (a lease's `binding.kind`); the
    #: scheduler places a lease with a binding only on hosts whose source starts its kind.
    workloads: ClassVar[frozenset[str]] = frozenset()
    #: False where one source is a world of its own (a Kubernetes cluster): a lease spread over
    #: several hosts stays within one source. True: it may span the sources of this kind.
    spans_sources: ClassVar[bool] = True
    #: Keys a config entry of this kind may carry (besides name, kind, pool).
    config_keys: ClassVar[frozenset[str]] = frozenset()
    #: Config keys holding secrets: stored encrypted apart from the config, never exported. A
    #: dotted path names a key of a nested entry (`telemetry.token`).
    secret_fields: ClassVar[tuple[str, ...]] = ()

    # Timeouts and retries: class-wide defaults that one instance may change (its config entry
    # does for the timeouts; tests shrink the retries).
    #: Seconds to reach the source: TCP connect, TLS or SSH handshake, authentication. A config
    #: entry overrides it with `connect_timeout`.
    connect_timeout_s: float = 10.0
    #: Seconds one request (or remote command) may take; a config entry overrides it with the key
    #: `request_timeout_key` names.
    request_timeout_s: float = 10.0
    request_timeout_key: ClassVar[str] = "request_timeout"
    #: Pauses between attempts of one call; their count bounds the retries.
    retry_delays: tuple[float, ...] = (0.5, 1.0, 2.0)
    #: Wall-clock ceiling for one call including retries (STYLE: a 15 s budget).
    retry_budget_s: float = 15.0

    def __init__(self, name: str, config: Mapping[str, Any]) -> None:
        self.name = name
        self.config = config
        # Per instance, so one entry's settings (or a test's shrunken ones) never leak into another.
        # Bad values are reported by `validate_config`; here they fall back to the kind's default.
        self.connect_timeout_s = _seconds(config.get("connect_timeout"), type(self).connect_timeout_s)
        self.request_timeout_s = _seconds(config.get(self.request_timeout_key), type(self).request_timeout_s)

    @abstractmethod
    def discover(self) -> Discovery:
        """Read the current fleet. Per-host failures go on HostFact.error, never raise."""

    def host_backoff(self) -> HostBackoff | None:
        """How hosts of this source that fail to answer are probed less often (`agents.host_backoff`),
        or None (the default): every host is read every round. None suits a kind that reads its
        whole fleet in one call (a Kubernetes cluster's node list): leaving one host out saves nothing."""
        return None

    def discover_except(self, skip: frozenset[str]) -> Discovery:
        """`discover` without probing the hosts named in `skip` (they are backing off): they are left
        out of the Discovery, so inventory keeps their rows as they are. A kind with a `host_backoff`
        overrides it; the default reads every host."""
        return self.discover()

    def bind(self, request: BindRequest) -> BindingStatus:
        """Start the workload for a lease; idempotent (a retry finds the first copy)."""
        raise AgentError(f"source kind {self.kind!r} cannot bind workloads", permanent=True)

    def unbind(self, handle: Mapping[str, Any], *, grace_s: int) -> None:
        """Stop the workload: notice first, forced end after `grace_s`. Idempotent."""
        raise AgentError(f"source kind {self.kind!r} cannot unbind workloads", permanent=True)

    def bind_handle(self, request: BindRequest) -> Mapping[str, Any] | None:
        """A handle `unbind` accepts for whatever a bind of `request` may have started without
        reporting it (a bind that failed, timed out or whose worker died after asking the host):
        the workload found by its deterministic name, stopped if it is there, and kept from
        starting if it is not yet. None when such a bind cannot have left anything behind."""
        return None

    def observe(self, handle: Mapping[str, Any]) -> BindingStatus:
        """Report the workload's live status."""
        raise AgentError(f"source kind {self.kind!r} cannot observe workloads", permanent=True)

    def logs(self, handle: Mapping[str, Any], *, tail: int | None, follow: bool) -> LogStream:
        """The workload's output: its last `tail` lines (None: all of it), then, with `follow`,
        what it writes as it writes it, until it ends. Connects before it returns, so that an
        unreachable host or a log that is gone raises AgentError here rather than mid-stream
        (`permanent=True`: the log no longer exists; transient: try again)."""
        raise AgentError(f"source kind {self.kind!r} cannot read workload logs", permanent=True)

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> list[str]:
        """Return human error messages for a bad config entry (empty when fine)."""
        return []

    def retrying(self, what: str, attempt: Callable[[float], T], *, timeout: float | None = None) -> T:
        """Return `attempt(seconds)`, trying again after each RetryableError while the budget lasts.

        Each attempt may take `timeout` seconds (default `request_timeout_s`), less when less of
        `retry_budget_s` is left; the pauses between attempts are `retry_delays`, or longer where
        the source asked for more (`RetryableError.retry_after`: a wait it asked for that the
        budget cannot cover ends the call at once, rather than hammer it sooner). Any other
        exception ends the call at once (permanent errors are never retried). Giving up raises
        `AgentError("<what>: <last problem> (gave up after N attempts)", permanent=False)`.
        """
        per_attempt = self.request_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + self.retry_budget_s
        problem, attempts = "", 0
        for pause in (*self.retry_delays, None):
            attempts += 1
            try:
                return attempt(min(per_attempt, max(deadline - time.monotonic(), 0.1)))
            except RetryableError as exc:
                problem, asked = exc.message, exc.retry_after
            if pause is None:
                break
            wait = pause if asked is None else max(pause, asked)
            if time.monotonic() + wait >= deadline:
                if asked is not None and asked > pause:
                    problem += f"; asked to retry after {asked:g} s, beyond the {self.retry_budget_s:g} s budget"
                break
            time.sleep(wait)
        prefix = f"{what}: " if what else ""
        raise AgentError(f"{prefix}{problem} (gave up after {attempts} attempts)", permanent=False)


def _seconds(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return default
    return float(value)
