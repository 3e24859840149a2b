"""The other networks built from the spec: each network's switches and their ports, every
endpoint (tray, BMC, service node) with its interfaces, where each is cabled, and the
addresses each interface gets.

An endpoint on several networks is one endpoint with an interface on each (a tray's
front-end and storage ports); a tray's BMC is an endpoint of its own, ``HOST-bmc``.
Addresses come from each network's subnet in the order its endpoints are attached,
the gateway left out.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from .. import gpus
from ..errors import Problem, SpecError
from ..ethernet import DEFAULT_INTERFACE, SWITCH_MODELS, port_name
from ..spec import hostlist
from ..spec.schema import Spec
from ..spec.schema.networks import Network
from .cluster import Domain, Tray

BMC_SUFFIX = "-bmc"
NVSWITCH_SUFFIX = "-nvsw"  # an NVLink domain's switch trays: DOMAIN-nvsw1 ...
_END = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\[(\d+)\]$")


@dataclass
class Interface:
    """One interface of an endpoint: its name, network, address (``A.B.C.D/len``) and
    the switch port at its other end."""

    name: str
    network: str
    address: str
    switch: str
    port: int

    @property
    def peer(self) -> str:
        return f"{self.switch}[{self.port}]"


@dataclass
class Endpoint:
    """A tray, a tray's BMC or a service node, with its interfaces (``tray``: the tray a
    BMC belongs to)."""

    name: str
    kind: str  # tray | bmc | service | nvswitch
    interfaces: list[Interface] = field(default_factory=list)
    tray: str | None = None


@dataclass
class EthSwitch:
    """An Ethernet switch of one network: the far end of each cabled port, as
    ``ENDPOINT/IFACE`` or ``SWITCH[port]``."""

    name: str
    network: str
    model: str
    ports: dict[int, str] = field(default_factory=dict)


@dataclass
class NetworkInfo:
    name: str
    kind: str
    subnet: str
    gateway: str | None
    vlan: int | None


@dataclass
class Networks:
    """Every network of a cluster beside its compute fabric."""

    networks: list[NetworkInfo] = field(default_factory=list)
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    switches: dict[str, EthSwitch] = field(default_factory=dict)
    # every cable: (node, interface) at each end, a switch's interface its port's name
    links: list[tuple[tuple[str, str], tuple[str, str]]] = field(default_factory=list)

    def to_json(self) -> dict:
        """As ``fabriclab networks --json`` prints it."""
        eps = [
            {
                "name": e.name,
                "kind": e.kind,
                "interfaces": [
                    {"name": i.name, "network": i.network, "address": i.address, "peer": i.peer}
                    for i in e.interfaces
                ],
            }
            for e in self.endpoints.values()
        ]
        for s in self.switches.values():
            eps.append(
                {
                    "name": s.name,
                    "kind": "switch",
                    "network": s.network,
                    "model": SWITCH_MODELS[s.model].name,
                    "interfaces": [
                        {"name": port_name(p), "network": s.network, "address": None, "peer": far}
                        for p, far in sorted(s.ports.items())
                    ],
                }
            )
        return {
            "networks": [
                {
                    "name": n.name,
                    "kind": n.kind,
                    "subnet": n.subnet,
                    "gateway": n.gateway,
                    "vlan": n.vlan,
                }
                for n in self.networks
            ],
            "endpoints": eps,
        }


def _bad(where: str, what: str) -> SpecError:
    return SpecError([Problem(where, what)])


def switch_tray_names(domain: Domain) -> list[str]:
    """The NVLink switch trays of ``domain`` (as many as its GPUs' model has:
    :data:`...gpus.MODELS`), each a host on the management network."""
    model = gpus.model(domain.trays[0].gpu_model) if domain.trays else None
    count = model.switch_trays if model is not None else 0
    return [f"{domain.name}{NVSWITCH_SUFFIX}{k}" for k in range(1, count + 1)]


def _endpoints(
    text: str, where: str, trays: dict[str, Tray], services: set[str], domains: dict[str, Domain]
) -> list[tuple[str, str]]:
    """An attach's endpoints as (name, kind)."""
    kind, sep, names = text.partition(":")
    if not sep:
        kind, names = "tray", text
    if kind not in ("tray", "bmc", "service", "nvswitch"):
        raise _bad(
            where,
            f"unknown endpoint kind {kind!r}: write HOSTS, bmc:HOSTS, service:NAMES or "
            "nvswitch:DOMAINS",
        )
    try:
        hosts = hostlist.expand(names)
    except hostlist.HostlistError as e:
        raise _bad(where, str(e)) from None
    out = []
    if kind == "nvswitch":
        for d in hosts:
            if d not in domains:
                raise _bad(where, f"no NVLink domain {d!r}")
            found = switch_tray_names(domains[d])
            if not found:
                raise _bad(
                    where,
                    f"NVLink domain {d!r} has no NVLink switch trays (its GPUs' NVSwitches "
                    "are on their baseboards)",
                )
            out += [(n, kind) for n in found]
        return out
    for h in hosts:
        if kind in ("tray", "bmc") and h not in trays:
            raise _bad(where, f"no tray {h!r}")
        if kind == "service" and h not in services:
            raise _bad(where, f"no service node {h!r} (the spec's services)")
        out.append((h + BMC_SUFFIX if kind == "bmc" else h, kind))
    return out


def build_networks(spec: Spec, trays: list[Tray], domains: list[Domain] | None = None) -> Networks:
    """The spec's networks over ``trays`` and the NVLink ``domains``' switch trays;
    SpecError naming the key at fault."""
    nets = Networks()
    by_host = {t.host: t for t in trays}
    services = {s.name for s in spec.services}
    domains = domains or []
    by_domain = {d.name: d for d in domains}
    taken_names = set(by_host) | services | {n for d in domains for n in switch_tray_names(d)}
    for ni, net in enumerate(spec.networks):
        where = f"networks[{ni}]"
        if any(n.name == net.name for n in nets.networks):
            raise _bad(f"{where}.name", f"network {net.name!r} appears twice")
        nets.networks.append(NetworkInfo(net.name, net.kind, net.subnet, net.gateway, net.vlan))
        for si, sw in enumerate(net.switches):
            if sw.name in nets.switches or sw.name in taken_names:
                raise _bad(f"{where}.switches[{si}].name", f"name {sw.name!r} is taken")
            nets.switches[sw.name] = EthSwitch(sw.name, net.name, sw.model)
        _attach(nets, net, where, by_host, services, by_domain)
        _uplinks(nets, net, where)
    return nets


def _attach(nets: Networks, net: Network, where: str, by_host, services, domains) -> None:
    subnet = ipaddress.IPv4Network(net.subnet)
    free = (a for a in subnet.hosts() if str(a) != net.gateway)
    for ai, att in enumerate(net.attach):
        at = f"{where}.attach[{ai}]"
        sw = nets.switches.get(att.switch)
        if sw is None or sw.network != net.name:
            raise _bad(f"{at}.switch", f"no switch {att.switch!r} in network {net.name!r}")
        nports = SWITCH_MODELS[sw.model].ports
        for k, (name, kind) in enumerate(
            _endpoints(att.endpoints, f"{at}.endpoints", by_host, services, domains)
        ):
            port = att.first_port + k
            if port > nports:
                raise _bad(
                    f"{at}.first_port",
                    f"{att.switch} has {nports} ports; {name} would take port {port}",
                )
            if port in sw.ports:
                raise _bad(
                    f"{at}.first_port",
                    f"{att.switch}[{port}] is already cabled to {sw.ports[port]}",
                )
            iface = att.interface or DEFAULT_INTERFACE.get((kind, net.kind))
            if iface is None:
                raise _bad(
                    f"{at}.interface", f"name the interface of a {kind} on a {net.kind} network"
                )
            ep = nets.endpoints.setdefault(
                name, Endpoint(name, kind, tray=name[: -len(BMC_SUFFIX)] if kind == "bmc" else None)
            )
            if any(i.name == iface for i in ep.interfaces):
                raise _bad(f"{at}.interface", f"{name} has interface {iface} twice")
            addr = next(free, None)
            if addr is None:
                raise _bad(f"{where}.subnet", f"{net.subnet} has no address left for {name}")
            ep.interfaces.append(
                Interface(iface, net.name, f"{addr}/{subnet.prefixlen}", sw.name, port)
            )
            sw.ports[port] = f"{name}/{iface}"
            nets.links.append(((name, iface), (sw.name, port_name(port))))


def _uplinks(nets: Networks, net: Network, where: str) -> None:
    for ui, up in enumerate(net.uplinks):
        at = f"{where}.uplinks[{ui}]"
        ends = []
        for text in up.ends:
            m = _END.match(text)
            sw = nets.switches.get(m.group(1)) if m else None
            if m is None or sw is None or sw.network != net.name:
                raise _bad(at, f"{text!r}: want SWITCH[port], a switch of {net.name!r}")
            port = int(m.group(2))
            if not 1 <= port <= SWITCH_MODELS[sw.model].ports or port in sw.ports:
                raise _bad(at, f"{text}: no such port, or it is cabled already")
            ends.append((sw, port))
        (a, pa), (b, pb) = ends
        if a is b:
            raise _bad(at, "an uplink joins two switches")
        a.ports[pa] = f"{b.name}[{pb}]"
        b.ports[pb] = f"{a.name}[{pa}]"
        nets.links.append(((a.name, port_name(pa)), (b.name, port_name(pb))))
