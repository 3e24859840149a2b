"""Providers: topograph-style providers that turn inputs into a topology graph.

- ``infiniband``: the fabric the user gave (topology.inputs): topograph's
  ``infiniband-bm`` rules (``--compat topograph``) or fabriclab's own reading;
- ``simulation_model``: topograph's simulation models, for its ``test``, ``*-sim`` and
  ``dra`` providers (the API's ``--models-dir``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..graph import Graph
from .infiniband import compat_graph, fabric_graph, hosts_of

if TYPE_CHECKING:
    from ..inputs import Inputs


# A running fabric's tray whose every link is down: its scan (ibnetdiscover) does not
# reach it, so it is in no switch's list and no block; said, never dropped silently.
CUT_OFF = "every InfiniBand link of the tray is down: the fabric's scan does not reach it"


def local_graph(inputs: Inputs, nodes: list[str] | None, *, compat: bool, names: bool) -> Graph:
    """The graph of the fabric the user gave, for ``nodes`` (None: every host the inputs
    know): read by topograph's rules with ``compat``, else by fabriclab's (``names``:
    switch names instead of ids; blocks by fabric proximity, named after the spec's
    domains); what is left out goes to ``inputs.report``, and a running fabric's tray
    that its scan does not reach (``CUT_OFF``) by name."""
    reached = hosts_of(inputs.fabric)
    for tray in inputs.trays:  # a running fabric's cabled trays
        if tray in reached:
            continue
        if nodes is None:
            inputs.report.warn(tray, f"{CUT_OFF}; left out of the topology")
        elif tray in nodes:  # the provider lists it under no-topology, and says so
            inputs.report.warn(tray, CUT_OFF)
    if compat:
        wanted = nodes if nodes is not None else inputs.hosts
        return compat_graph(inputs.dumps, wanted, inputs.smi)
    graph = fabric_graph(inputs.fabric, nodes, inputs.smi, names=names, report=inputs.report)
    graph.domain_names = dict(inputs.domain_names)
    return graph
