"""History routes, mounted under /api/v1/history/ by pool.api.urls."""

from django.urls import re_path

from history.api.views import GpuHistoryView, PoolHistoryView, TeamHistoryView

# The trailing slash is optional, as on every other route of the API. A GPU's UUID may hold a
# slash (old MIG device names: MIG-GPU-…/1/0), hence the open pattern.
urlpatterns = [
    re_path(r"^pools/(?P<name>[-\w]+)/?$", PoolHistoryView.as_view(), name="history-pool"),
    re_path(r"^teams/(?P<name>[-\w]+)/?$", TeamHistoryView.as_view(), name="history-team"),
    re_path(r"^gpus/(?P<uuid>.+?)/?$", GpuHistoryView.as_view(), name="history-gpu"),
]
