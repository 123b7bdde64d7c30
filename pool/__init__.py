"""The gpupool Django project: settings, Celery app, root URLs."""

from pool.celery import app as celery_app

__all__ = ["celery_app"]
