from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from allocation.api.fleet import GpuViewSet, HostViewSet, PoolViewSet
from allocation.api.views import LeaseViewSet, PriorityClassViewSet, QuotaViewSet, TeamViewSet
from pool.health import healthz, metrics

router = DefaultRouter()
router.register("pools", PoolViewSet, basename="pool")
router.register("hosts", HostViewSet, basename="host")
router.register("gpus", GpuViewSet, basename="gpu")
router.register("teams", TeamViewSet, basename="team")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("priority-classes", PriorityClassViewSet, basename="priorityclass")
router.register("leases", LeaseViewSet, basename="lease")

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("healthz/", healthz),
    path("metrics", metrics, name="metrics"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include(router.urls)),
    path("admin/", admin.site.urls),
    path("", include("frontend.urls")),
]

handler404 = "pool.health.not_found"
handler500 = "pool.health.server_error"
