"""Dashboard views, one module per page; they translate HTTP and delegate to selectors/services."""

from frontend.views.audit import audit
from frontend.views.capacity import capacity, capacity_confirm_view, capacity_preview_view
from frontend.views.fleet import fleet, fleet_heatmap_json, fleet_heatmap_page, fleet_table, host_action, host_page
from frontend.views.fleet_bulk import bulk_confirm_view, bulk_preview_view
from frontend.views.history import gpu_history_page, pool_history_page
from frontend.views.leases import (
    lease_detail,
    lease_release_view,
    lease_renew_view,
    leases,
    queue,
    reservation_cancel_view,
)
from frontend.views.overview import overview
from frontend.views.quotas import quota_edit, quotas, team_weight
from frontend.views.teams import pools, team_page, teams
from frontend.views.usage import usage, usage_csv

__all__ = [
    "audit", "bulk_confirm_view", "bulk_preview_view", "capacity", "capacity_confirm_view", "capacity_preview_view",
    "fleet", "fleet_heatmap_json", "fleet_heatmap_page", "fleet_table", "gpu_history_page", "host_action",
    "host_page", "lease_detail", "lease_release_view", "lease_renew_view", "leases", "overview",
    "pool_history_page", "pools", "queue", "quota_edit", "quotas", "reservation_cancel_view", "team_page",
    "team_weight", "teams", "usage", "usage_csv",
]
