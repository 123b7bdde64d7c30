"""The GPU-hour economy: the meter closing a lease's hours (metering) and the chargeback report as
callers ask for it (chargeback). Budgets are written by allocation.services.budgets; the rows are
allocation.models.usage."""
