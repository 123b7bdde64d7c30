"""Notifications: webhooks and e-mail to the configured targets (`notifications:` in the YAML) and
to users' own subscriptions, derived from committed facts only.

Where each event comes from, all of it committed before anything is derived:
- lease transitions (`lease.granted` after a wait, `lease.preempted`, `lease.lost`): the outbox
  rows of lease events (`allocation.models.LeaseOutbox`), which each transition writes in its own
  transaction; `dispatch.py` reads them after its cursor, in the order their transactions ended
  (`cursor.py`), and moves the cursor, never writing an outbox row;
- `budget.warning` and `lease.idle`: a `NotificationEvent` row written by the budget refresh and
  the idle check in the transaction that claims the warning (`record.py`);
- `lease.expiring`: the holding leases whose `expires_at` is near, found by `dispatch.py`; the
  delivery's key names the expiry time, so a renewal (a new `expires_at`) arms it again.

Each (event, target) pair is one `NotificationDelivery` row, unique on (event key, target): a
dispatcher run twice, or run again after a crash, never derives a second one. `send.py` claims due
rows for a while, sends them (`transports.py`) and records the outcome; a crash between a send and
its record is a redelivery with the same `X-Gpupool-Delivery` id once the claim lapses. Exactly
once over HTTP is not possible; the stable delivery id lets a receiver drop the repeat.

`allocation/notify_vocabulary.py` (beside this package, so that the models may use it) holds the words
and checks of a target in plain Python, shared by the configuration parser, the models and the API.
"""
