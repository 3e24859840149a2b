"""The Slurm engine's one error: a Slurm topology that cannot be generated for a graph
and the options given."""

from __future__ import annotations

from ...errors import TopologyProblem


class SlurmTopologyError(TopologyProblem):
    """A Slurm topology that cannot be generated for this graph and these options;
    ``status`` is the HTTP status topograph answers it with."""
