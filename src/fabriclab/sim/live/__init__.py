"""The live fabric: faults, scenarios, traffic, time and the event log of a running
fabric, and the journal that brings them back after a restart.

- the API: ``api`` (:class:`.api.LiveFabric`), ``admin_requests`` (the admin socket's
  requests), ``clock`` (wall or virtual time);
- ``faults/``: the faults in force and what each does to the fabric while it lasts;
- ``traffic/``: data flows over the fabric and the counters they move;
- scenarios: ``scenario`` (the file), ``scenario_run`` (its steps run);
- records: ``events`` and ``events_memory`` (the event log), ``journal`` (its file) and
  ``journal_doc`` (what it keeps).
"""
