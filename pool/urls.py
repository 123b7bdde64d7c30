from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from pool.health import healthz, metrics

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("healthz/", healthz),
    path("metrics", metrics, name="metrics"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("pool.api.urls")),
    path("admin/", admin.site.urls),
    path("", include("frontend.urls")),
]

handler400 = "core.api.errors.bad_request"
handler403 = "core.api.errors.permission_denied"
handler404 = "pool.health.not_found"
handler500 = "pool.health.server_error"
