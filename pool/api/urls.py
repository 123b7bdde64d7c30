"""The REST API's routes, all under /api/v1/ (mounted by pool.urls)."""

from django.urls import include, path, re_path
from rest_framework.routers import DefaultRouter

from allocation.api.audit import AuditEventViewSet
from allocation.api.fleet import GpuViewSet, HostViewSet, PoolViewSet
from allocation.api.leases import LeaseViewSet
from allocation.api.notifications import DeliveryViewSet, SubscriptionViewSet
from allocation.api.reservations import ReservationViewSet
from allocation.api.sso import DeviceStartView, DeviceTokenView
from allocation.api.teams import PriorityClassViewSet, QuotaViewSet, TeamViewSet
from allocation.api.usage import UsageViewSet


class Router(DefaultRouter):
    """The trailing slash is optional: `POST /api/v1/leases` must not become a redirect that drops
    the body. (DRF turns a `trailing_slash` argument into '/' or '', hence the attribute.)"""

    def __init__(self) -> None:
        super().__init__()
        self.trailing_slash = "/?"


router = Router()
router.register("pools", PoolViewSet, basename="pool")
router.register("hosts", HostViewSet, basename="host")
router.register("gpus", GpuViewSet, basename="gpu")
router.register("teams", TeamViewSet, basename="team")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("priority-classes", PriorityClassViewSet, basename="priorityclass")
router.register("leases", LeaseViewSet, basename="lease")
router.register("reservations", ReservationViewSet, basename="reservation")
router.register("audit-events", AuditEventViewSet, basename="auditevent")
router.register("notifications/subscriptions", SubscriptionViewSet, basename="notificationsubscription")
router.register("notifications/deliveries", DeliveryViewSet, basename="notificationdelivery")

urlpatterns = [
    path("history/", include("history.api.urls")),
    *router.urls,
    re_path(r"^usage/?$", UsageViewSet.as_view({"get": "report"}), name="usage"),
    # The CLI's single sign-on (allocation/api/sso.py): anonymous, by the device authorization grant.
    re_path(r"^auth/device/?$", DeviceStartView.as_view(), name="sso-device"),
    re_path(r"^auth/device/token/?$", DeviceTokenView.as_view(), name="sso-device-token"),
]
