"""``nvidia-smi`` as a tray shows it: the NVLink fabric fields of each GPU.

Rendering: ``--query-gpu=<fields> --format=csv[,noheader]`` and the ``-q`` Fabric
section (layout of a real driver 565 ``nvidia-smi -q``).  Parsing: the answers topograph
collects with ``pdsh -w <hosts> nvidia-smi --query-gpu=fabric.clusterUuid,
fabric.cliqueId --format=csv,noheader``, one ``host: <uuid>, <clique>`` line per GPU.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from .. import inputs
from ..errors import InputError, Problem, ProblemLog
from ..limits import MAX_HOSTS, SMI_BYTES_MAX
from ..model.cluster import Tray

TOPOGRAPH_QUERY = "--query-gpu=fabric.clusterUuid,fabric.cliqueId --format=csv,noheader"
_GPU_UUID_NS = uuid.UUID("a3c5e0f2-41d7-4b6e-9c8a-5d2f7e1b0c94")


def gpu_uuid(host: str, index: int) -> str:
    """A GPU's UUID (``GPU-…``), fixed by its tray and index."""
    return f"GPU-{uuid.uuid5(_GPU_UUID_NS, f'{host}/{index}')}"


def pci_bus_id(index: int) -> str:
    """The PCI bus id shown for GPU ``index`` (made up: buses 0x18, 0x28, …)."""
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


FIELDS = {
    "index": lambda g: str(g.index),
    "uuid": lambda g: gpu_uuid(g.tray.host, g.index),
    "gpu_uuid": lambda g: gpu_uuid(g.tray.host, g.index),
    "pci.bus_id": lambda g: pci_bus_id(g.index),
    "gpu_bus_id": lambda g: pci_bus_id(g.index),
    "fabric.clusterUuid": lambda g: g.cluster_uuid,
    "fabric.cliqueId": lambda g: str(g.clique),
    "fabric.state": lambda g: g.fabric_state[0],
    "fabric.status": lambda g: g.fabric_state[1],
}


def render_query(tray: Tray, args: list[str]) -> str:
    """``nvidia-smi --query-gpu=… --format=csv[,noheader]`` on this tray."""
    query = fmt = None
    for a in args:
        if a.startswith("--query-gpu="):
            query = a.split("=", 1)[1]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        else:
            raise InputError([Problem("nvidia-smi", f"unsupported argument {a!r}")])
    if query is None or fmt is None:
        raise InputError(
            [Problem("nvidia-smi", "give --query-gpu=FIELDS and --format=csv[,noheader]")]
        )
    opts = fmt.split(",")
    if opts[0] != "csv" or any(o not in ("noheader", "nounits") for o in opts[1:]):
        raise InputError([Problem("nvidia-smi", f"unsupported --format={fmt}")])
    fields = [f.strip() for f in query.split(",")]
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise InputError(
            [
                Problem(
                    "nvidia-smi",
                    f"field {unknown[0]!r} is not modelled (known: {', '.join(FIELDS)})",
                )
            ]
        )
    lines = [] if "noheader" in opts else [", ".join(fields)]
    for g in tray.gpus:
        lines.append(", ".join(FIELDS[f](g) for f in fields))
    return "".join(line + "\n" for line in lines)


def render(tray: Tray, args: list[str]) -> str:
    """What ``nvidia-smi ARGS`` prints on this tray: with no arguments its summary
    screen, ``-q`` (its Fabric part) or the query form (topograph's)."""
    if not args:
        from .nvidia_smi_screen import render_summary

        return render_summary(tray)
    return render_q_fabric(tray) if args == ["-q"] else render_query(tray, args)


def render_q_fabric(tray: Tray) -> str:
    """The ``Fabric`` part of ``nvidia-smi -q`` for each GPU of the tray."""
    out = []
    for g in tray.gpus:
        out.append(f"GPU {pci_bus_id(g.index)}\n")
        out.append("    Fabric\n")
        state, status = g.fabric_state
        out.append(f"        State                             : {state}\n")
        out.append(f"        Status                            : {status}\n")
        out.append(f"        CliqueId                          : {g.clique}\n")
        out.append(f"        ClusterUUID                       : {g.cluster_uuid}\n")
        out.append("        Health\n")
        # healthMask DEGRADED_BW: a faulted GPU's bandwidth is degraded (nvml.h)
        bandwidth = "Degraded" if g.nvlink_fault else "N/A"
        out.append(f"            Bandwidth                     : {bandwidth}\n")
        out.append("\n")
    return "".join(out)


def render_pdsh(trays: list[Tray]) -> str:
    """What ``pdsh -w <trays> nvidia-smi <topograph's query>`` prints."""
    return "".join(f"{t.host}: {g.cluster_uuid}, {g.clique}\n" for t in trays for g in t.gpus)


# --- parsing ---------------------------------------------------------------------------


@dataclass
class GpuAnswer:
    """One GPU's answer line: its host, position, cluster UUID and clique as written."""

    host: str
    gpu: int  # position in the host's answer
    cluster_uuid: str
    clique: str
    line: int


@dataclass
class SmiAnswers:
    """Per host, the GPUs' (cluster UUID, clique) as answered, plus what could not be read."""

    source: str
    hosts: dict[str, list[GpuAnswer]] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # host -> its lines, for topograph's parser
    problems: list[Problem] = field(default_factory=list)


_PDSH = re.compile(r"^([^:\s]+)\s*:\s?(.*)$")
GPUS_PER_HOST_MAX = 64  # a tray's GPUs in a spec (TrayGroup.gpus)


def parse_pdsh(text: str, source: str) -> SmiAnswers:
    """pdsh-prefixed answers (``host: <uuid>, <clique>`` lines), problems kept as warnings."""
    ans = SmiAnswers(source)
    log = ProblemLog()
    raw: dict[str, list[str]] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        # topograph splits at the first ':' and keeps whatever follows (parsePdshNvidiaSMIOutput)
        if ":" in line:
            host, rest = line.split(":", 1)
            raw.setdefault(host.strip(), []).append(rest.strip() + "\n")
        m = _PDSH.match(line)
        if not m:
            log.add(f"{source}:{no}", f"not a 'host: <uuid>, <clique>' line: {line[:60]!r}")
            continue
        host, rest = m.group(1), m.group(2).strip()
        fields = [f.strip() for f in rest.split(",")]
        if len(fields) != 2:
            log.add(
                f"{source}:{no}", f"{host[:64]}: expected '<uuid>, <clique>', got {rest[:60]!r}"
            )
            continue
        gpus = ans.hosts.get(host)
        if gpus is None:
            if len(ans.hosts) >= MAX_HOSTS:
                raise InputError(
                    [Problem(f"{source}:{no}", f"answers from more than {MAX_HOSTS} hosts")]
                )
            gpus = ans.hosts[host] = []
        if len(gpus) >= GPUS_PER_HOST_MAX:
            log.add(
                f"{source}:{no}", f"{host[:64]}: more than {GPUS_PER_HOST_MAX} GPUs answer; ignored"
            )
            continue
        gpus.append(GpuAnswer(host, len(gpus), fields[0][:64], fields[1][:64], no))
    ans.raw = {h: "".join(parts) for h, parts in raw.items()}  # joined once: linear in the text
    ans.problems = log.items
    if log.dropped:
        ans.problems.append(Problem(source, f"{log.dropped} more lines like these"))
    return ans


def parse_pdsh_file(path: str) -> SmiAnswers:
    """``parse_pdsh`` of a file, size-checked before it is read."""
    return parse_pdsh(
        inputs.read_text(path, SMI_BYTES_MAX, "nvidia-smi answers", strict=False), path
    )


def topograph_partition(output: str) -> str:
    """topograph's ``ParseNvidiaSMIOutput``: the one ``<uuid>.<clique>`` of a host's
    answer, or ValueError with topograph's own message."""
    parts = set()
    for line in output.splitlines():
        line = line.strip()
        if not line:
            continue
        fields = line.split(",")
        if len(fields) != 2:
            raise ValueError(f'expected ClusterUUID and CliqueId CSV fields, got "{line}"')
        cu, cl = fields[0].strip(), fields[1].strip()
        if not cu:
            raise ValueError("missing ClusterUUID")
        if cu == "N/A":
            raise ValueError("ClusterUUID is N/A")
        if not cl:
            raise ValueError("missing CliqueId")
        if cl == "N/A":
            raise ValueError("CliqueId is N/A")
        parts.add(f"{cu}.{cl}")
    if not parts:
        raise ValueError("missing NVL partition ID")
    if len(parts) != 1:
        raise ValueError("ambiguous NVL partition IDs: " + ", ".join(sorted(parts)))
    return parts.pop()
