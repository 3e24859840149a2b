"""What a fault's TARGET names in the running fabric: a link (either end, written as in a
spec's links, ``SWITCH[port]`` or ``HOST/HCA[port]``), a switch, or a tray.

Names resolve through the model's one resolver (:meth:`Cluster.locate`) and the spec's
endpoint syntax (:func:`fabriclab.spec.schema.parse_endpoint`); a target that names
nothing is an :class:`InputError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....errors import InputError, Problem
from ....model.cluster import Cluster
from ....spec.schema import parse_endpoint
from ...fabric.state import SimFabric, SimPort

LINK, PORT, SWITCH, TRAY = "link", "port", "switch", "tray"


@dataclass(frozen=True)
class Target:
    """A resolved target: its kind, the text it was written as, and its ports (a link:
    the end named first; a switch or tray: every cabled port)."""

    kind: str
    text: str
    ports: tuple[SimPort, ...]

    @property
    def links(self) -> list[tuple[SimPort, SimPort]]:
        """The cabled links of the target, each as (named end, far end)."""
        return [(p, p.peer) for p in self.ports if p.peer is not None]


def link_name(p: SimPort) -> str:
    """A link as a spec writes it, ``A[p] -- B[q]`` (by node names)."""
    ends = [f"{p.node.fabric_node.name}[{p.num}]"]
    if p.peer is not None:
        ends.append(f"{p.peer.node.fabric_node.name}[{p.peer.num}]")
    return " -- ".join(ends)


def port_name(p: SimPort) -> str:
    """One port as a spec writes a link's end, ``NODE[port]``."""
    return f"{p.node.fabric_node.name}[{p.num}]"


class Resolver:
    """Resolves TARGET texts on one running fabric."""

    def __init__(self, cluster: Cluster, sim: SimFabric):
        self.cluster = cluster
        self.sim = sim

    def _fail(self, text: str, why: str) -> InputError:
        return InputError([Problem(text, why)])

    def resolve(self, text: str, *, cabled: bool = True, port0: bool = False) -> Target:
        """The target ``text`` names.  ``cabled``: a port must have a link;
        ``port0``: a switch's port 0 may be named (MAD drops)."""
        if not isinstance(text, str) or not text.strip():
            raise self._fail(
                str(text), "an empty target (want SWITCH[port], HOST/HCA[port], a switch or a tray)"
            )
        text = text.strip()
        end = parse_endpoint(text)
        if end is not None:
            return self._port(text, *end, cabled=cabled, port0=port0)
        if "[" in text or "]" in text:
            raise self._fail(text, "bad target: want SWITCH[port] or HOST/HCA[port]")
        cluster = self.cluster
        tray = cluster.tray(text)
        if tray is not None:
            ports = [
                self.sim.port_of(p)
                for hca in tray.hcas
                for p in hca.iter_ports()
                if p.peer is not None
            ]
            if not ports:
                raise self._fail(text, f"tray {text!r} has no cabled HCA port")
            return Target(TRAY, text, tuple(ports))
        node = cluster.fabric.find(text)
        if node is not None and node.is_switch:
            sn = self.sim.node_of(node)
            ports = [p for p in sn.ports if p is not None and p.num and p.peer is not None]
            return Target(SWITCH, text, tuple(ports))
        port, problem = cluster.locate(text)  # a CA: HOST/HCA, its first cabled port
        if port is None:
            raise self._fail(text, problem or "names no port, switch or tray")
        sp = self.sim.port_of(port)
        if cabled and sp.peer is None:
            raise self._fail(text, f"{port_name(sp)} is not cabled")
        return Target(LINK, text, (sp,))

    def _port(self, text: str, name: str, num: int, *, cabled: bool, port0: bool) -> Target:
        port, problem = self.cluster.locate(f"{name}:{num}", switches=True)
        if port is None:
            if problem.startswith("no tray, CA or node"):
                problem = (
                    f"no switch, tray or HCA {name!r} in this fabric"
                    + self.cluster.did_you_mean(name)
                )
            raise self._fail(text, problem)
        sp = self.sim.port_of(port)
        if num == 0:
            if not port0:
                raise self._fail(text, "port 0 is the switch's management port, not a link")
            return Target(PORT, text, (sp,))
        if cabled and sp.peer is None:
            raise self._fail(text, f"{port_name(sp)} is not cabled")
        return Target(LINK, text, (sp,))
