"""Data traffic over a running fabric: ``engine`` (:class:`.engine.TrafficEngine`: its API
and time steps), ``flows`` (the flow table), ``routes`` (routes over the forwarding
tables and partition cuts), ``rates`` and ``maxmin`` (max-min fair rates), ``counters``
(a flow's bytes as port counters), ``commands`` (the traffic command's words)."""
