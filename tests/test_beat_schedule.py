"""Every beat entry names a task the worker has registered, and expires before it piles up."""

from pool.celery import app


def test_every_beat_entry_names_a_registered_task() -> None:
    app.loader.import_default_modules()
    registered = set(app.tasks)
    for name, entry in app.conf.beat_schedule.items():
        assert entry["task"] in registered, f"beat entry {name} names unknown task {entry['task']}"
        assert entry["options"]["expires"] > 0


def test_scheduling_passes_go_to_a_queue_of_their_own_that_run_and_compose_consume() -> None:
    """A pass must never wait behind discovery or binding: its queue has a dedicated worker."""
    from pathlib import Path

    from django.conf import settings

    app.loader.import_default_modules()
    route = app.amqp.router.route({}, "allocation.schedule_pass")
    assert route["queue"].name == settings.SCHEDULE_QUEUE == "gpupool.schedule"
    assert app.amqp.router.route({}, "inventory.discover_due_sources")["queue"].name == "gpupool"
    repo = Path(__file__).resolve().parent.parent
    assert "-Q gpupool.schedule" in (repo / "scripts" / "run.sh").read_text()
