import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pool.settings")
from a2wsgi import WSGIMiddleware
from django.core.wsgi import get_wsgi_application

application = WSGIMiddleware(get_wsgi_application(), workers=2)
