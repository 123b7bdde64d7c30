"""Trace replay (`manage.py simulate`): traces and fleets (replay), the live inventory of a pool as
a fleet (live), and where a replayed job may run (where)."""
