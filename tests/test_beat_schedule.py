"""Every beat entry names a task the worker has registered, and expires before it piles up."""

from pool.celery import app


def test_every_beat_entry_names_a_registered_task() -> None:
    app.loader.import_default_modules()
    registered = set(app.tasks)
    for name, entry in app.conf.beat_schedule.items():
        assert entry["task"] in registered, f"beat entry {name} names unknown task {entry['task']}"
        assert entry["options"]["expires"] > 0
