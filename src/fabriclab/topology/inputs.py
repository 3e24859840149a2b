"""The inputs of a topology: what the user gave, as one set: a spec's cluster (seen as
topograph would see it), or what a real cluster shows (ibnetdiscover dumps and the trays'
nvidia-smi answers), and the scheduler's nodes (``--nodes``).  The providers
(topology.providers) turn them into a graph."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..formats import ibnetdiscover, nvidia_smi
from ..inputs import path_kind, read_text
from ..limits import MAX_HOSTS, NODES_FILE_BYTES_MAX
from ..model.cluster import Cluster, find_port
from ..model.fabric import Fabric, Node
from ..model.nvlink import partition_names
from ..spec import hostlist
from .errors import InputsError, OptionError
from .providers.infiniband import hosts_of
from .report import Report


@dataclass
class Inputs:
    """A fabric, the dumps it was read from (or rendered to), the nvidia-smi answers,
    the hosts these know (in order), each host's GPU count, what could not be used,
    (from a spec or a running fabric) the spec's name of each NVLink partition as
    nvidia-smi shows it (``<ClusterUUID>.<CliqueId>``), and (from a running fabric) the
    trays cabled to it, which its scan should reach."""

    fabric: Fabric
    dumps: list[str]  # ibnetdiscover text, as topograph would read it
    smi: nvidia_smi.SmiAnswers | None
    hosts: list[str]  # the hosts these inputs know, in order
    gpus: dict[str, int] = field(default_factory=dict)
    report: Report = field(default_factory=Report)
    domain_names: dict[str, str] = field(default_factory=dict)
    trays: list[str] = field(default_factory=list)


def from_cluster(cluster: Cluster) -> Inputs:
    """The cluster as topograph would see it: ibnetdiscover run on the first tray, and
    every tray's nvidia-smi answer."""
    start, problem = find_port(cluster, None)
    if start is None:
        raise InputsError(problem or "the fabric has no CA", where="spec")
    text = ibnetdiscover.render(cluster.fabric, start)
    smi = nvidia_smi.parse_pdsh(nvidia_smi.render_pdsh(cluster.trays), "nvidia-smi")
    return Inputs(
        cluster.fabric,
        [text],
        smi,
        [t.host for t in cluster.trays],
        {t.host: len(t.gpus) for t in cluster.trays},
        domain_names=partition_names(cluster.domains),
    )


def from_files(ib_paths: list[str], smi_path: str | None) -> Inputs:
    """ibnetdiscover dumps (several are joined: ``_union``) and an optional file of
    pdsh-prefixed nvidia-smi answers; what could not be read is reported."""
    report = Report()
    dumps = [_dump(ibnetdiscover.read_file(path), path, report) for path in ib_paths]
    smi = nvidia_smi.parse_pdsh_file(smi_path) if smi_path else None
    return _joined(dumps, smi, report)


def from_views(name: str, ib_text: str, smi_text: str, facts: dict | None = None) -> Inputs:
    """What the running fabric ``name`` shows now: its ibnetdiscover and its trays'
    pdsh-prefixed nvidia-smi answers (problems are named ``NAME.ibnetdiscover`` and
    ``NAME.nvidia-smi``), with what it knows of its cluster (``facts``: ``domains``, the
    spec's names of its NVLink partitions, and ``trays``, its cabled trays in the spec's
    order), so that blocks are named and hosts ordered as from the spec it serves."""
    report = Report()
    dumps = [_dump(ib_text, f"{name}.ibnetdiscover", report)]
    inputs = _joined(dumps, nvidia_smi.parse_pdsh(smi_text, f"{name}.nvidia-smi"), report)
    facts = facts or {}
    domains, trays = facts.get("domains") or {}, facts.get("trays") or []
    if not (
        isinstance(domains, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in domains.items())
        and isinstance(trays, list)
        and all(isinstance(t, str) for t in trays)
    ):
        raise InputsError("the fabric's answer about its cluster is malformed", where=name)
    inputs.domain_names = dict(domains)
    inputs.trays = list(trays)
    known = set(trays)
    inputs.hosts = list(trays) + [h for h in inputs.hosts if h not in known]
    return inputs


def _dump(text: str, source: str, report: Report) -> tuple[str, Fabric]:
    """An ibnetdiscover dump's text and fabric; what could not be read goes to ``report``."""
    dump = ibnetdiscover.parse(text, source)
    for problem in dump.warnings:
        report.warn(
            problem.where,
            problem.what,
            left_out="only named as the far end" not in problem.what,
        )
    if dump.warnings_dropped:
        report.warn(source, f"{dump.warnings_dropped} more problems like these")
    return text, dump.fabric


def _joined(
    dumps: list[tuple[str, Fabric]], smi: nvidia_smi.SmiAnswers | None, report: Report
) -> Inputs:
    """The inputs of some dumps (joined) and nvidia-smi answers."""
    fabrics = [fabric for _, fabric in dumps]
    fabric = fabrics[0] if len(fabrics) == 1 else _union(fabrics, report)
    hosts = list(hosts_of(fabric))
    if smi is not None:
        hosts += [host for host in smi.hosts if host not in hosts]
    gpus = {host: len(host_gpus) for host, host_gpus in (smi.hosts.items() if smi else [])}
    return Inputs(fabric, [text for text, _ in dumps], smi, hosts, gpus, report)


def _union(fabrics: list[Fabric], report: Report) -> Fabric:
    """Several dumps of one fabric (or of separate fabrics): the first copy of each node
    and each cable wins; a node whose GUID an earlier dump gave another id is left out."""
    out = Fabric()
    for fabric in fabrics:
        for node in fabric.nodes:
            if node.label in out.by_label:
                continue
            if node.ident is None and node.guid in out.by_guid:
                report.warn(
                    node.label,
                    f"GUID 0x{node.guid:016x} is already "
                    f"{out.by_guid[node.guid].label} in an earlier dump; left out",
                )
                continue
            copy = Node(
                node.type,
                node.guid,
                node.nports,
                node.desc,
                vendid=node.vendid,
                devid=node.devid,
                sysimgguid=node.sysimgguid,
                port_guid=node.port_guid,
                ident=node.ident,
            )
            copy.lid, copy.lmc, copy.enhanced_port0 = node.lid, node.lmc, node.enhanced_port0
            for port, port_copy in zip(node.iter_ports(), copy.iter_ports(), strict=False):
                port_copy.guid, port_copy.lid, port_copy.lmc = port.guid, port.lid, port.lmc
            out.add(copy)
    for fabric in fabrics:
        for end_a, end_b in fabric.links():
            node_a, node_b = out.by_label.get(end_a.node.label), out.by_label.get(end_b.node.label)
            if (
                node_a is None
                or node_b is None
                or end_a.num > node_a.nports
                or end_b.num > node_b.nports
            ):
                continue
            port_a, port_b = node_a.ports[end_a.num], node_b.ports[end_b.num]
            if (
                port_a is not None
                and port_b is not None
                and port_a.peer is None
                and port_b.peer is None
            ):
                out.connect(port_a, port_b, end_a.width, end_a.speed)
    return out


def requested_nodes(arg: str | None) -> list[str] | None:
    """``--nodes``: a file of host names (one per line, hostlists allowed) or a hostlist.
    Every hostlist is counted before it is expanded, and all of them together name at
    most MAX_HOSTS hosts."""
    if arg is None:
        return None
    names: list[str] = []
    if path_kind(arg, "--nodes") == "file":  # otherwise a hostlist
        text = read_text(arg, NODES_FILE_BYTES_MAX, "a file of node names")
        total = 0
        for line_number, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                total += hostlist.count(line)
                if total > MAX_HOSTS:
                    raise OptionError(
                        f"the file names more than {MAX_HOSTS} hosts", where=f"{arg}:{line_number}"
                    )
                names.extend(hostlist.expand(line))
            except hostlist.HostlistError as e:
                raise OptionError(str(e), where=f"{arg}:{line_number}") from None
    else:
        try:
            names = hostlist.expand(arg)
        except hostlist.HostlistError as e:
            raise OptionError(str(e), where="--nodes") from None
    return names
