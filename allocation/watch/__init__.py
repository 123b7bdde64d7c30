"""Waiting without polling: the long poll on one lease and the stream of lease changes.

`events.py` (in allocation) writes committed changes to a log; `feed.py` reads it once per web
process; `handlers.py` serves the two endpoints on the event loop; `access.py` holds the reads
they share with the API (authentication, visibility, lease JSON)."""
