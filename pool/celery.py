"""The Celery app and the one beat registry.

Every periodic entry has an `expires` so a backlog after downtime does not replay stale passes.
tests/test_beat_schedule.py checks that every entry names a registered task.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, bootsteps
from celery.app.amqp import AMQP
from celery.signals import task_postrun, task_prerun, worker_init, worker_process_init, worker_process_shutdown
from kombu import Connection

from core import liveness

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pool.settings")

#: The longest wait between two attempts to reach a broker that is down.
RECONNECT_MAX_S = 0.5
logger = logging.getLogger(__name__)


class BrokerConnection(Connection):
    """kombu's Connection, retrying a broker that is down at most RECONNECT_MAX_S apart.

    kombu waits 2, 4, 6, … up to 30 s between attempts: after Redis was down 60 s, workers and
    beat reached it again 11 s after it came back, and passes with them (the fault suite's
    redis_down scenario measured it). An attempt on a broker that refuses costs a millisecond (a
    Sentinel group: a question to each sentinel, as many), so the wait is kept short however long
    the outage: passes resume within 2 s of the broker's return (tests/faults/test_outages.py)."""

    def ensure_connection(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) <= 2:  # (errback, max_retries): the intervals are left to us
            kwargs.setdefault("interval_start", RECONNECT_MAX_S / 2)
            kwargs.setdefault("interval_step", RECONNECT_MAX_S / 2)
            kwargs.setdefault("interval_max", RECONNECT_MAX_S)
            callback = kwargs.get("callback")

            def waiting() -> None:  # kombu calls it every second between attempts
                liveness.stamp()  # waiting for the broker is not being stuck: no restart for a Redis outage
                if callback is not None:
                    callback()

            kwargs["callback"] = waiting
        return super().ensure_connection(*args, **kwargs)

    def maybe_close_channel(self, channel: Any) -> None:
        """Close `channel`, unless the transport it belongs to was taken away already.

        On a lost connection Celery 5.7 collects the connection (transport detached), then closes
        it. A Redis channel whose first close failed on the dead socket (a BRPOP in flight) is
        closed again then, and restoring its unacknowledged messages through the transport that is
        gone raises AttributeError, which the worker takes for an unrecoverable error: it exits
        (the redis_down fault scenario saw both workers go at once). Such a channel has nothing
        left to close: it is dropped, and its unacknowledged messages come back after the
        visibility timeout, as when a restore fails on a broker that is down."""
        transport = getattr(channel, "connection", None)
        if transport is not None and getattr(transport, "client", True) is None:
            return
        super().maybe_close_channel(channel)


class BrokerAMQP(AMQP):
    Connection = BrokerConnection


class Heartbeat(bootsteps.StartStopStep):
    """A worker's heartbeat (core.liveness): a timer on the worker's event loop touches the file,
    so it goes stale when that loop is stuck, whatever the pool's children are running."""

    requires = ("celery.worker.components:Timer",)
    #: Seconds between two touches; the probe's --max-age is many of these.
    every_s = 1.0

    def start(self, worker: Any) -> None:
        liveness.stamp()
        self.tref = worker.timer.call_repeatedly(self.every_s, liveness.stamp)

    def stop(self, worker: Any) -> None:
        tref = getattr(self, "tref", None)
        if tref is not None:
            tref.cancel()


class CatchUpOnConnect(bootsteps.StartStopStep):
    """Each time a worker's consumer (re)connects to the broker, it asks for the catch-up task
    (allocation.relay_lease_events: the passes recorded as wanted while no trigger could be sent,
    and the lease events left unpublished): what waited for the broker runs as soon as a worker
    hears it again, not at beat's next tick (beat too must first find the broker again)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        try:
            c.app.send_task("allocation.relay_lease_events", expires=60)
        except Exception:  # the broker went again: the next reconnection asks again
            logger.warning("could not ask for the catch-up after connecting to the broker", exc_info=True)


app = Celery("gpupool", amqp=BrokerAMQP)
app.steps["worker"].add(Heartbeat)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["inventory", "allocation", "history"])
app.steps["consumer"].add(CatchUpOnConnect)


@task_prerun.connect
@task_postrun.connect
def _recycle_connections(task: Any = None, **_: object) -> None:
    """Around each task: close the database connections that are past CONN_MAX_AGE or broke, as
    Django does around each request, and keep the rest (settings.CELERY_DB_REUSE_MAX). Not for an
    eager task, which runs inside its caller's transaction."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@worker_process_init.connect
def _relay_in_background(**_: object) -> None:
    """A prefork child leaves the publishing of its lease events to one relay thread, as a web
    process does (allocation/outbox_thread.py): a pass's commit then wakes the thread instead of
    running the relay's five statements, two Redis calls and second commit before the task ends,
    so the scheduler process takes its next pool sooner, and the events of passes that commit
    while the thread runs go out in one relay round. GPUPOOL_OUTBOX_RELAY_THREAD=0: inline."""
    from django.conf import settings

    from allocation import outbox

    if settings.GPUPOOL.get("OUTBOX_RELAY_THREAD", True):
        outbox.relay_in_background()


@worker_process_shutdown.connect
def _stop_relay(**_: object) -> None:
    """The relay thread's current round ends before the child does (the periodic relay publishes
    anything left)."""
    from allocation import outbox

    outbox.stop_relay()


def _beat_schedule() -> dict[str, dict[str, object]]:
    from django.conf import settings

    gp = settings.GPUPOOL
    pass_s = float(gp["PASS_INTERVAL_S"])
    sample_s = float(gp["SAMPLE_INTERVAL_S"])
    return {
        # The periodic scheduling pass; lease events trigger extra passes at once.
        "schedule-pass": {"task": "allocation.schedule_pass", "schedule": pass_s,
                          "options": {"expires": pass_s}},
        # Publishes the lease events a writer left unpublished (crash, Redis away): the outbox
        # (allocation.events); and runs the passes whose trigger could not be sent (PassWanted).
        # On the schedule queue: its worker is never held for minutes by a bind, and a relay with
        # nothing to do is two reads (an index, an empty table). Workers ask for it too, each time
        # they reach the broker again (CatchUpOnConnect).
        "relay-lease-events": {"task": "allocation.relay_lease_events", "schedule": 1.0,
                               "options": {"expires": 1.0}},
        # Notifications (allocation.notify): derives deliveries from committed lease events and
        # warnings, sends the due ones with backoff. Commits that may notify ask for a run at once;
        # this catches up on lost triggers and retries.
        "deliver-notifications": {"task": "allocation.deliver_notifications", "schedule": 1.0,
                                  "options": {"expires": 1.0}},
        # Ends granted leases whose TTL ran out, and lost leases on long-offline hosts.
        "reap-leases": {"task": "allocation.reap_leases", "schedule": 5.0,
                        "options": {"expires": 5.0}},
        # Checks bound workloads (process exit, pod phase) and finishes leases being ended.
        "observe-bindings": {"task": "allocation.observe_bindings",
                             "schedule": float(gp["OBSERVE_INTERVAL_S"]),
                             "options": {"expires": float(gp["OBSERVE_INTERVAL_S"])}},
        # The ledger's invariants (manage.py check_ledger): an audit alert on drift.
        "check-ledger": {"task": "allocation.check_ledger", "schedule": 300.0,
                         "options": {"expires": 300.0}},
        # Warns, clears and reclaims idle leases (idle_reclaim rules), then flags and meters the
        # allocated but idle GPUs; utilisation samples come every SAMPLE_INTERVAL_S, so checking
        # more often would see nothing new.
        "idle-reclaim": {"task": "allocation.idle_reclaim", "schedule": sample_s,
                         "options": {"expires": sample_s}},
        # The time series store: this minute's points, finished hours rolled up, old ones pruned
        # (a second run in the same minute adds nothing).
        "record-history": {"task": "history.record", "schedule": 60.0,
                           "options": {"expires": 60.0}},
        # GPU-hour budgets: their standing from the meter, and the 80%/100% warnings. Lease
        # creation judges by this figure (plus the hours of the GPUs held since), so a minute is
        # the most a budget's view of ended or new grants lags.
        "refresh-budgets": {"task": "allocation.refresh_budgets", "schedule": 60.0,
                            "options": {"expires": 60.0}},
        # Fans out one discovery task per source whose own interval has elapsed.
        "discover-due-sources": {"task": "inventory.discover_due_sources", "schedule": 5.0,
                                 "options": {"expires": 5.0}},
    }


app.conf.beat_schedule = _beat_schedule()


@worker_init.connect
def _serve_worker_metrics(**_: object) -> None:
    """Task metrics of a worker on `GPUPOOL_WORKER_METRICS_PORT` (unset: not served).

    A prefork worker runs tasks in child processes: set `PROMETHEUS_MULTIPROC_DIR` (an empty
    directory per worker) so the children's counters are summed here; a solo or threads pool
    serves its own counters."""
    port = os.environ.get("GPUPOOL_WORKER_METRICS_PORT")
    if not port:
        return
    from prometheus_client import CollectorRegistry, start_http_server

    from core.tasks import TASK_METRICS

    registry = TASK_METRICS
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    start_http_server(int(port), registry=registry)
