"""Where a topology comes from: a spec (the modelled cluster) or what a real cluster
shows (ibnetdiscover dumps and the trays' nvidia-smi answers), as one set of inputs."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import inputs
from ..errors import InputError, Problem
from ..formats import ibnetdiscover, nvidia_smi
from ..limits import MAX_HOSTS, NODES_FILE_BYTES_MAX
from ..model.cluster import Cluster, find_port
from ..model.fabric import Fabric, Node
from ..spec import hostlist
from .graph import Graph
from .providers.infiniband import compat_graph, fabric_graph, hosts_of
from .report import Report


@dataclass
class Inputs:
    fabric: Fabric
    dumps: list[str]  # ibnetdiscover text, as topograph would read it
    smi: nvidia_smi.SmiAnswers | None
    hosts: list[str]  # the hosts these inputs know, in order
    gpus: dict[str, int] = field(default_factory=dict)
    report: Report = field(default_factory=Report)


def from_cluster(cluster: Cluster) -> Inputs:
    """The cluster as topograph would see it: ibnetdiscover run on the first tray, and
    every tray's nvidia-smi answer."""
    start, problem = find_port(cluster, None)
    if start is None:
        raise InputError([Problem("spec", problem or "the fabric has no CA")])
    text = ibnetdiscover.render(cluster.fabric, start)
    smi = nvidia_smi.parse_pdsh(nvidia_smi.render_pdsh(cluster.trays), "nvidia-smi")
    return Inputs(cluster.fabric, [text], smi, [t.host for t in cluster.trays],
                  {t.host: len(t.gpus) for t in cluster.trays})


def from_files(ib_paths: list[str], smi_path: str | None) -> Inputs:
    report = Report()
    texts, fabrics = [], []
    for path in ib_paths:
        text = ibnetdiscover.read_file(path)
        dump = ibnetdiscover.parse(text, path)
        for p in dump.warnings:
            report.warn(p.where, p.what, left_out="only named as the far end" not in p.what)
        if dump.warnings_dropped:
            report.warn(path, f"{dump.warnings_dropped} more problems like these")
        texts.append(text)
        fabrics.append(dump.fabric)
    fabric = fabrics[0] if len(fabrics) == 1 else _union(fabrics, report)
    smi = nvidia_smi.parse_pdsh_file(smi_path) if smi_path else None
    hosts = list(hosts_of(fabric))
    if smi is not None:
        hosts += [h for h in smi.hosts if h not in hosts]
    gpus = {h: len(g) for h, g in (smi.hosts.items() if smi else [])}
    return Inputs(fabric, texts, smi, hosts, gpus, report)


def _union(fabrics: list[Fabric], report: Report) -> Fabric:
    """Several dumps of one fabric (or of separate fabrics): the first copy of each node
    and each cable wins; a node whose GUID an earlier dump gave another id is left out."""
    out = Fabric()
    for f in fabrics:
        for n in f.nodes:
            if n.label in out.by_label:
                continue
            if n.ident is None and n.guid in out.by_guid:
                report.warn(n.label, f"GUID 0x{n.guid:016x} is already {out.by_guid[n.guid].label} "
                            "in an earlier dump; left out")
                continue
            m = Node(n.type, n.guid, n.nports, n.desc, vendid=n.vendid, devid=n.devid,
                     sysimgguid=n.sysimgguid, port_guid=n.port_guid, ident=n.ident)
            m.lid, m.lmc, m.enhanced_port0 = n.lid, n.lmc, n.enhanced_port0
            for p, q in zip(n.iter_ports(), m.iter_ports()):
                q.guid, q.lid, q.lmc = p.guid, p.lid, p.lmc
            out.add(m)
    for f in fabrics:
        for a, b in f.links():
            na, nb = out.by_label.get(a.node.label), out.by_label.get(b.node.label)
            if na is None or nb is None or a.num > na.nports or b.num > nb.nports:
                continue
            x, y = na.ports[a.num], nb.ports[b.num]
            if x is not None and y is not None and x.peer is None and y.peer is None:
                out.connect(x, y, a.width, a.speed)
    return out


def requested_nodes(arg: str | None, given: Inputs | None = None) -> list[str] | None:
    """``--nodes``: a file of host names (one per line, hostlists allowed) or a hostlist.
    Every hostlist is counted before it is expanded, and all of them together name at
    most MAX_HOSTS hosts."""
    if arg is None:
        return None
    names: list[str] = []
    if inputs.path_kind(arg, "--nodes") == "file":  # otherwise a hostlist
        text = inputs.read_text(arg, NODES_FILE_BYTES_MAX, "a file of node names")
        total = 0
        for no, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                total += hostlist.count(line)
                if total > MAX_HOSTS:
                    raise InputError([Problem(f"{arg}:{no}", f"the file names more than {MAX_HOSTS} "
                                              "hosts")])
                names.extend(hostlist.expand(line))
            except hostlist.HostlistError as e:
                raise InputError([Problem(f"{arg}:{no}", str(e))]) from None
    else:
        try:
            names = hostlist.expand(arg)
        except hostlist.HostlistError as e:
            raise InputError([Problem("--nodes", str(e))]) from None
    return names


def build_graph(inputs: Inputs, nodes: list[str] | None, *, compat: bool, names: bool) -> Graph:
    if compat:
        wanted = nodes if nodes is not None else inputs.hosts
        return compat_graph(inputs.dumps, wanted, inputs.smi)
    return fabric_graph(inputs.fabric, nodes if nodes is not None else None, inputs.smi,
                        names=names, report=inputs.report)
