"""The fabric seen from above: one HTTP process (``fabriclab api``, or ``fabriclab up
--api``) serving the whole fabric's Prometheus metrics (``/metrics``), a UFM-compatible
REST API (``/ufmRest``...), fabriclab's own API (``/api/v1``) and a live web view
(``/``), all read from a running fabric through its admin socket (:mod:`.source`)."""
