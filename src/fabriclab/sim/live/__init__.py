"""The live fabric: faults, bit errors, scenarios, traffic flows, time and the event log
of a running fabric, and the journal that brings them back after a restart.  The API is
:class:`.api.LiveFabric`.

- the API: ``api`` (LiveFabric), ``admin_requests`` (the admin socket's requests),
  ``clock`` (wall or virtual time), ``targets`` (what a fault's target text names);
- faults: ``faults`` (the faults in force, applied and cleared), ``fault_options``
  (their options checked), ``fault_ports`` (what a fault does to a port),
  ``fault_timeline`` (flaps and bit errors as the clock moves), ``ber`` (bit errors);
- scenarios: ``scenario`` (the file), ``scenario_run`` (its steps run);
- traffic: ``traffic`` (TrafficEngine), ``traffic_flows`` (the flow table),
  ``traffic_routes`` (routes and partition cuts), ``traffic_rates`` and ``maxmin``
  (rates), ``traffic_counters`` (a flow's bytes as counters), ``traffic_cmd`` (the
  traffic command's words);
- records: ``events`` and ``events_memory`` (the event log), ``journal`` (its file) and
  ``journal_doc`` (what it keeps).
"""
