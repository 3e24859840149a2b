"""Providers: topograph-style providers that turn inputs into a topology graph.

- ``infiniband``: the fabric the user gave (topology.inputs): topograph's
  ``infiniband-bm`` rules (``--compat topograph``) or fabriclab's own reading;
- ``simulation_model``: topograph's simulation models, for its ``test``, ``*-sim`` and
  ``dra`` providers (the API's ``--models-dir``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..graph import Graph
from .infiniband import compat_graph, fabric_graph

if TYPE_CHECKING:
    from ..inputs import Inputs


def local_graph(inputs: Inputs, nodes: list[str] | None, *, compat: bool, names: bool) -> Graph:
    """The graph of the fabric the user gave, for ``nodes`` (None: every host the inputs
    know): read by topograph's rules with ``compat``, else by fabriclab's (``names``:
    switch names instead of ids; blocks by fabric proximity, named after the spec's
    domains); what is left out goes to ``inputs.report``."""
    if compat:
        wanted = nodes if nodes is not None else inputs.hosts
        return compat_graph(inputs.dumps, wanted, inputs.smi)
    graph = fabric_graph(inputs.fabric, nodes, inputs.smi, names=names, report=inputs.report)
    graph.domain_names = dict(inputs.domain_names)
    return graph
