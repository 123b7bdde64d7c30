"""Every write of allocation goes through one service, one module per entity.

- `leases`: create, release, renew, reap and mark lost (users and the periodic tasks);
- `admin`: host cordon/drain/uncordon, quota and fair-share weight changes (pool admins);
- `capacity`: moving GPUs or whole hosts between pools as previewed (`allocation.selectors.capacity_preview`), under
  the pools' scheduling locks whichever door (API, dashboard) the admin came in by.

The API, the dashboard, the Django admin and the tasks call these; none writes a model itself.
"""
