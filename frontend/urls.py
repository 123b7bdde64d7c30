from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from frontend import views
from frontend.views.sso import LoginPage, sso_callback, sso_start

app_name = "frontend"
urlpatterns = [
    path("login/", LoginPage.as_view(), name="login"),
    # Single sign-on (OpenID Connect); the identity provider knows the callback as the redirect URI.
    path("login/sso/", sso_start, name="sso-login"),
    path("login/sso/callback/", sso_callback, name="sso-callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.overview, name="overview"),
    path("quotas/", views.quotas, name="quotas"),
    path("quotas/<int:quota_id>/", views.quota_edit, name="quota-edit"),
    path("quotas/teams/<slug:team_name>/weight/", views.team_weight, name="team-weight"),
    path("fleet/", views.fleet, name="fleet"),
    path("fleet/table/", views.fleet_table, name="fleet-table"),
    path("fleet/heatmap/", views.fleet_heatmap_page, name="fleet-heatmap"),
    path("fleet/heatmap.json", views.fleet_heatmap_json, name="fleet-heatmap-json"),
    path("fleet/bulk/preview/", views.bulk_preview_view, name="fleet-bulk-preview"),
    path("fleet/bulk/confirm/", views.bulk_confirm_view, name="fleet-bulk-confirm"),
    path("fleet/hosts/<int:host_id>/", views.host_page, name="host"),
    path("fleet/hosts/<int:host_id>/<str:verb>/", views.host_action, name="host-action"),
    path("queue/", views.queue, name="queue"),
    path("queue/reservations/<int:reservation_id>/cancel/", views.reservation_cancel_view,
         name="reservation-cancel"),
    path("leases/", views.leases, name="leases"),
    path("leases/<uuid:lease_id>/", views.lease_detail, name="lease-detail"),
    path("leases/<uuid:lease_id>/release/", views.lease_release_view, name="lease-release"),
    path("leases/<uuid:lease_id>/renew/", views.lease_renew_view, name="lease-renew"),
    path("audit/", views.audit, name="audit"),
    path("usage/", views.usage, name="usage"),
    path("usage.csv", views.usage_csv, name="usage-csv"),
    path("capacity/", views.capacity, name="capacity"),
    path("pools/", views.pools, name="pools"),
    path("pools/<slug:name>/", views.pool_history_page, name="pool-history"),
    path("teams/", views.teams, name="teams"),
    # A team's page: its quotas, leases, queue, members, budgets, reservations and history charts.
    path("teams/<slug:name>/", views.team_page, name="team"),
    # A GPU's UUID may hold slashes (old MIG device names: MIG-GPU-…/1/0).
    re_path(r"^gpus/(?P<uuid>.+)/$", views.gpu_history_page, name="gpu-history"),
    path("capacity/preview/", views.capacity_preview_view, name="capacity-preview"),
    path("capacity/confirm/", views.capacity_confirm_view, name="capacity-confirm"),
]
