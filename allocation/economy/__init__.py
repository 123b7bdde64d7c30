"""The GPU-hour economy: the meter closing a lease's hours (metering), the reads of the meter
(usage) and the chargeback report as callers ask for it (chargeback). Budgets are written by
allocation.services.budgets; the rows are allocation.models.usage."""
