"""Running it: the fabric server process (``up``, ``down``, ``status``), the records of
running fabrics, the admin socket, and real tools attached to a running fabric (``exec``,
``shims``)."""
