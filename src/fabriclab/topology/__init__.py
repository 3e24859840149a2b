"""Scheduler topology: the user's inputs turned by a provider into a topology graph, and
the graph turned by an engine into what a scheduler reads (Slurm files, Kubernetes
labels, Kueue and KWOK manifests), on the command line and as topograph's HTTP API.

- ``inputs``: what the user gave (a spec's cluster, dumps, nvidia-smi answers, --nodes);
- ``providers``: topograph-style providers that turn inputs or models into a ``graph``;
- ``engines``: what consumes the graph;
- ``options``, ``command``: the command's options into engine options, and the commands;
- ``server`` with ``api_models``, ``request_body``, ``request_queue``: the HTTP API;
- ``cluset``, ``fnv``, ``report``, ``errors``, ``topograph_test_graphs``: their helpers.
"""
