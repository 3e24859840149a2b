"""Traffic commands as the CLI, the admin socket and scenarios write them, turned into
calls of the traffic engine (:mod:`.engine`): endpoints resolved, sizes and rates
read, flows shown and kept in the journal.

- ``send FROM TO``: FROM and TO are a tray (its first HCA) or ``HOST/HCA``;
- ``all-to-all SET`` / ``ring SET``: SET is a hostlist of trays (``node[1-8]``) or of
  ``HOST/HCA``;
- ``stop [ID]`` (all flows without one), ``list``.

``bytes``: an integer with an optional K/M/G/T (powers of 1000) or Ki/Mi/Gi/Ti suffix;
``rate``: payload per second, bytes (``12.5GB/s``, ``500MB/s``, a plain number) or bits
(``100Gb/s``, ``100Gbps``).
"""

from __future__ import annotations

import re

from ....errors import InputError, Problem
from ....limits import MAX_TRAYS
from ....model.cluster import Cluster
from ....spec import hostlist
from ...fabric.state import SimFabric, SimPort

VERBS = ("send", "all-to-all", "ring", "stop", "list")
SET_MAX = 4 * MAX_TRAYS  # endpoints in one all-to-all or ring
_SIZE = re.compile(r"^\s*(\d{1,20})\s*([KMGT]i?)?B?\s*$", re.I)
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([KMGT]?)(B/s|b/s|bps|Bps)?\s*$")
_MUL = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _bad(where: str, what: str) -> InputError:
    return InputError([Problem(where, what)])


def parse_bytes(value) -> int:
    """A byte count (``4096``, ``64Mi``, ``10G``)."""
    if isinstance(value, bool):
        raise _bad("--bytes", f"{value!r} is not a number of bytes")
    m = _SIZE.match(str(value)) if len(str(value)) < 40 else None
    if not m:
        raise _bad("--bytes", f"{value!r}: want bytes, e.g. 4096, 64Mi, 10G")
    unit = (m.group(2) or "").upper()
    mul = 1024 ** ("KMGT".index(unit[0]) + 1) if unit.endswith("I") else _MUL[unit]
    n = int(m.group(1)) * mul
    if not 0 < n < 1 << 62:
        raise _bad("--bytes", f"{value!r}: out of range")
    return n


def parse_rate(value) -> float:
    """A rate in payload bytes per second (``12.5GB/s``, ``100Gb/s``, ``1e9``)."""
    if isinstance(value, bool):
        raise _bad("--rate", f"{value!r} is not a rate")
    m = _RATE.match(str(value)) if len(str(value)) < 40 else None
    if not m:
        raise _bad("--rate", f"{value!r}: want e.g. 12.5GB/s, 100Gb/s or bytes per second")
    v = float(m.group(1)) * _MUL[m.group(2)]
    if m.group(3) in ("b/s", "bps"):
        v /= 8
    if not 0 < v < 1e15:
        raise _bad("--rate", f"{value!r}: out of range")
    return v


def endpoint(cluster: Cluster, sim: SimFabric, text: str) -> SimPort:
    """A tray (its first HCA) or ``HOST/HCA``, as a CA port."""
    port, problem = cluster.locate(text)
    if port is None:
        raise _bad(text, problem)
    return sim.port_of(port)


def endpoints(cluster: Cluster, sim: SimFabric, text: str) -> list[SimPort]:
    """A hostlist of trays or ``HOST/HCA``, counted before it is expanded."""
    try:
        n = hostlist.count(text)
        if n > SET_MAX:
            raise _bad(text, f"{n} endpoints: at most {SET_MAX}")
        names = hostlist.expand(text)
    except ValueError as e:
        raise _bad(text, str(e)) from None
    return [endpoint(cluster, sim, name) for name in names]


def parse(cluster: Cluster, sim: SimFabric, words: list[str], options: dict) -> tuple:
    """(verb, ports or a flow id, bytes, rate) of a traffic command's words."""
    if not words or words[0] not in VERBS:
        got = words[0] if words else ""
        raise _bad("traffic", f"unknown traffic verb {got!r} (known: {', '.join(VERBS)})")
    verb, args = words[0], words[1:]
    if verb in ("stop", "list"):
        if (verb == "list" and args) or len(args) > 1:
            raise _bad(verb, f"want 'traffic {verb}{' [ID]' if verb == 'stop' else ''}'")
        fid = None
        if args and args[0] != "all":
            if not args[0].isdigit():
                raise _bad(args[0], "is not a flow id")
            fid = int(args[0])
        return verb, fid, None, None
    size = options.get("bytes")
    rate = options.get("rate")
    if (size is None) == (rate is None):
        raise _bad(verb, "want one of --bytes N or --rate R")
    size = parse_bytes(size) if size is not None else None
    rate = parse_rate(rate) if rate is not None else None
    if verb == "send":
        if len(args) != 2:
            raise _bad("send", "want 'traffic send FROM TO'")
        a, b = endpoint(cluster, sim, args[0]), endpoint(cluster, sim, args[1])
        if a is b:
            raise _bad(args[1], "a flow needs two different ports")
        return verb, (a, b), size, rate
    if len(args) != 1:
        raise _bad(verb, f"want 'traffic {verb} SET' (a hostlist)")
    ports = endpoints(cluster, sim, args[0])
    if len(ports) < 2:
        raise _bad(args[0], "want at least two endpoints")
    return verb, ports, size, rate


def _key(p: SimPort) -> str:
    return f"{p.node.index}:{p.num}"


def flow_json(f) -> dict:
    """A flow as the API shows it."""
    return {
        "id": f.id,
        "from": f.src.node.fabric_node.name,
        "to": f.dst.node.fabric_node.name,
        "rate": f.rate,
        "sent": f.sent,
        "delivered": f.delivered,
        "size": f.size,
        "limit": f.limit,
        "state": f.state,
        "dropped": f.dropped,
    }


def flows_doc(engine) -> list[dict]:
    """The running flows, for the journal (what is left of each)."""
    out = []
    for f in engine.flows():
        if f.state != "running":
            continue
        left = None if f.size is None else f.size - f.delivered
        out.append(
            {"id": f.id, "src": _key(f.src), "dst": _key(f.dst), "left": left, "limit": f.limit}
        )
    return out


def flow_ports(sim: SimFabric, doc: list[dict]) -> list[tuple[SimPort, SimPort]]:
    """The ends of the flows a journal had running (``node:port``, checked by
    :mod:`..journal_model`): two different CA ports of ``sim`` each, or an InputError
    naming the first that is not."""
    pairs = []
    for i, d in enumerate(doc):
        ends = []
        for k in ("src", "dst"):
            ni, _, pn = d[k].partition(":")
            node = sim.nodes[int(ni)] if int(ni) < len(sim.nodes) else None
            p = node.port(int(pn)) if node is not None else None
            if p is None or node is None or node.is_switch or p.num == 0:
                raise _bad(f"traffic.{i}.{k}", f"{d[k]}: not a CA port of this fabric")
            ends.append(p)
        if ends[0] is ends[1]:
            raise _bad(f"traffic.{i}", "a flow needs two different ports")
        pairs.append((ends[0], ends[1]))
    return pairs


def restore_flows(engine, pairs: list[tuple[SimPort, SimPort]], doc: list[dict]) -> None:
    """Start again, all at once, the flows a journal had running (``pairs``: their ends,
    :func:`flow_ports`; each with what it had left and its rate limit; the engine
    numbers them anew)."""
    if pairs:
        engine.add_each(pairs, [d["left"] for d in doc], [d["limit"] for d in doc])
