"""Traffic commands as the CLI, the admin socket and scenarios write them, turned into
calls of the traffic engine (:mod:`.engine`): endpoints resolved, sizes and rates
read, flows shown and kept in the journal.

- ``send FROM TO``: FROM and TO are a tray (its first HCA) or ``HOST/HCA``;
- ``all-to-all SET`` / ``ring SET``: SET is a hostlist of trays (``node[1-8]``) or of
  ``HOST/HCA``;
- ``stop [ID]`` (all flows without one), ``list`` (options ``state``, ``from``, ``to``,
  ``id`` pick flows, ``limit`` how many of them to show).

``bytes``: an integer with an optional K/M/G/T (powers of 1000) or Ki/Mi/Gi/Ti suffix;
``rate``: payload per second, bytes (``12.5GB/s``, ``500MB/s``, a plain number) or bits
(``100Gb/s``, ``100Gbps``); ``timeout`` (0-31) and ``retry_count`` (0-7): the flows'
queue pair attributes (:mod:`fabriclab.ib.transport`).
"""

from __future__ import annotations

import re

from ....errors import InputError, Problem
from ....ib.transport import NCCL_RETRY_CNT, NCCL_TIMEOUT, RETRY_CNT_MAX, TIMEOUT_MAX
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


def parse_qp(options: dict) -> dict:
    """The queue pair attributes of a command's options: ``timeout`` (0-31) and
    ``retry_count`` (0-7), each when given."""
    out = {}
    for key, flag, top in (
        ("timeout", "--timeout", TIMEOUT_MAX),
        ("retry_count", "--retry-count", RETRY_CNT_MAX),
    ):
        v = options.get(key)
        if v is None:
            continue
        n = v if isinstance(v, int) and not isinstance(v, bool) else None
        if isinstance(v, str) and v.strip().isdigit() and len(v) < 8:
            n = int(v)
        if n is None or not 0 <= n <= top:
            raise _bad(flag, f"{v!r}: want a whole number from 0 to {top}")
        out[key] = n
    return out


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
    """(verb, ports or a flow id, bytes, rate, queue pair attributes) of a traffic
    command's words (``list``: its filters in place of the ports)."""
    if not words or words[0] not in VERBS:
        got = words[0] if words else ""
        raise _bad("traffic", f"unknown traffic verb {got!r} (known: {', '.join(VERBS)})")
    verb, args = words[0], words[1:]
    if verb == "list":
        if args:
            raise _bad(verb, "want 'traffic list' (filters are options)")
        return verb, list_filter(cluster, sim, options), None, None, {}
    if verb == "stop":
        if options:
            raise _bad(verb, f"takes no option (got {str(sorted(options)[0])[:40]!r})")
        if len(args) > 1:
            raise _bad(verb, f"want 'traffic {verb}{' [ID]' if verb == 'stop' else ''}'")
        fid = None
        if args and args[0] != "all":
            if not args[0].isdigit():
                raise _bad(args[0], "is not a flow id")
            fid = int(args[0])
        return verb, fid, None, None, {}
    unknown = sorted(set(options) - {"bytes", "rate", "timeout", "retry_count"})
    if unknown:
        raise _bad(
            verb, f"unknown option {unknown[0]!r} (options: bytes, rate, timeout, retry_count)"
        )
    size = options.get("bytes")
    rate = options.get("rate")
    if (size is None) == (rate is None):
        raise _bad(verb, "want one of --bytes N or --rate R")
    size = parse_bytes(size) if size is not None else None
    rate = parse_rate(rate) if rate is not None else None
    qp = parse_qp(options)
    if verb == "send":
        if len(args) != 2:
            raise _bad("send", "want 'traffic send FROM TO'")
        a, b = endpoint(cluster, sim, args[0]), endpoint(cluster, sim, args[1])
        if a is b:
            raise _bad(args[1], "a flow needs two different ports")
        return verb, (a, b), size, rate, qp
    if len(args) != 1:
        raise _bad(verb, f"want 'traffic {verb} SET' (a hostlist)")
    ports = endpoints(cluster, sim, args[0])
    if len(ports) < 2:
        raise _bad(args[0], "want at least two endpoints")
    return verb, ports, size, rate, qp


def _ca_ports(sim: SimFabric) -> dict[str, list[SimPort]]:
    """Every CA port by the names a filter may give: ``HOST/HCA`` and its tray."""
    out: dict[str, list[SimPort]] = {}
    for n in sim.nodes:
        if n.is_switch:
            continue
        name = str(n.fabric_node.name)
        ports = [p for p in n.ports[1:] if p is not None]
        out.setdefault(name, []).extend(ports)
        if "/" in name:
            out.setdefault(name.split("/", 1)[0], []).extend(ports)
    return out


def list_filter(cluster: Cluster, sim: SimFabric, options: dict) -> dict:
    """A listing's options checked: ``states`` (names, or None), ``src``/``dst`` (CA
    ports, or None), ``ids`` (or None), ``limit`` (flows to show; None: all)."""
    known = {"state", "from", "to", "id", "limit"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise _bad("list", f"unknown option {unknown[0]!r} (options: {', '.join(sorted(known))})")
    out: dict = {"states": None, "src": None, "dst": None, "ids": None, "limit": None}
    state = options.get("state")
    if state is not None:
        out["states"] = [s.strip() for s in str(state).split(",") if s.strip()]
    names = None
    for key, flag in (("from", "src"), ("to", "dst")):
        text = options.get(key)
        if text is None:
            continue
        names = names if names is not None else _ca_ports(sim)
        wanted = [str(text)]
        if "[" in wanted[0]:  # a hostlist of trays
            try:
                if hostlist.count(wanted[0]) > SET_MAX:
                    raise _bad(f"--{key}", f"{text!r}: more than {SET_MAX} names")
                wanted = hostlist.expand(wanted[0])
            except ValueError as e:
                raise _bad(f"--{key}", str(e)) from None
        ports: list[SimPort] = []
        for w in wanted:
            if w in names:
                ports += names[w]
            else:
                ports.append(endpoint(cluster, sim, w))
        out[flag] = ports
    for key, flag in (("id", "ids"), ("limit", "limit")):
        v = options.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and v.isdigit())):
            raise _bad(f"--{key}", f"{v!r} is not a whole number")
        out[flag] = [int(v)] if flag == "ids" else int(v)
    return out


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
        "reason": f.reason,
        "timeout": f.timeout,
        "retry_count": f.retry_count,
    }


def listing(engine, filt: dict) -> dict:
    """``list``'s answer: the ``summary`` of the flows the filter picks, the first
    ``limit`` of them (``flows``) and how many ``more`` there are."""
    idx = engine.select(filt["states"], filt["src"], filt["dst"], filt["ids"])
    limit = filt["limit"]
    shown = idx if limit is None else idx[:limit]
    return {
        "summary": engine.summary(idx),
        "flows": [flow_json(f) for f in engine.flows_at(shown)],
        "more": len(idx) - len(shown),
    }


def flows_doc(engine) -> list[dict]:
    """The running and retrying flows, for the journal (what is left of each, its
    queue pair attributes)."""
    out: list[dict] = []
    if not engine.counted():  # no flows ever: no need of the fabric's snapshot (32k HCAs: 1.6 s)
        return out
    for f in engine.flows_at(engine.select(["running", "retrying"])):
        left = None if f.size is None else f.size - f.delivered
        out.append(
            {
                "id": f.id,
                "src": _key(f.src),
                "dst": _key(f.dst),
                "left": left,
                "limit": f.limit,
                "timeout": f.timeout,
                "retry_count": f.retry_count,
            }
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
    :func:`flow_ports`; each with what it had left, its rate limit and its queue pair's
    attributes; the engine numbers them anew)."""
    if pairs:
        engine.add_each(
            pairs,
            [d["left"] for d in doc],
            [d["limit"] for d in doc],
            [d.get("timeout", NCCL_TIMEOUT) for d in doc],
            [d.get("retry_count", NCCL_RETRY_CNT) for d in doc],
        )
