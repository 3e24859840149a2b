"""``/metrics``'s small series, as ``prometheus_client`` metric families written by its
``generate_latest``: the exporter's own health series, and fabriclab's faults, events,
server counts, flows and clock (each a request to the fabric's admin socket, or the
event log read on from where the last scrape left it)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from ..errors import FabriclabError, InputError
from .metrics_events import EventCounter
from .source import Source
from .view import State

# The fault kinds a fabric takes (fabriclab.sim.live.faults.options.KINDS; the API may
# not import the server's modules: a test checks the two agree).
FAULT_KINDS = ("down", "flap", "degrade", "errors", "drop", "nvlink")
SEVERITIES = ("Info", "Warning", "Minor", "Major", "Critical")  # UFM's, the event log's


def small_families(source: Source, state: State, events: EventCounter) -> list:
    """The small series: the exporter's health, faults, events, the server's counts,
    traffic, the clock."""
    fams: list = []
    for name, help_ in (
        (
            "infiniband_exporter_collect_errors",
            "Number of errors that occurred during collection",
        ),
        (
            "infiniband_exporter_collect_timeouts",
            "Number of timeouts that occurred during collection",
        ),
    ):
        g = GaugeMetricFamily(name, help_, labels=["collector"])
        for c in ("ibnetdiscover", "switch", "hca"):
            g.add_metric([c], 0)
        fams.append(g)
    clock = GaugeMetricFamily(
        "fabriclab_fabric_clock_seconds",
        "The fabric clock (virtual or wall), seconds since it came up",
    )
    clock.add_metric([], state.now)
    fams.append(clock)
    virtual = GaugeMetricFamily(
        "fabriclab_fabric_clock_virtual", "1: the fabric runs on a virtual clock"
    )
    virtual.add_metric([], 1 if state.virtual else 0)
    fams.append(virtual)
    faults = GaugeMetricFamily(
        "fabriclab_faults_active", "Faults in force, by kind", labels=["kind"]
    )
    kinds = dict.fromkeys(FAULT_KINDS, 0)
    for f in source.request("faults"):
        kinds[str(f.get("kind"))] = kinds.get(str(f.get("kind")), 0) + 1
    for k, v in kinds.items():
        faults.add_metric([k], v)
    fams.append(faults)
    fams.extend(net_families(source))
    logged = CounterMetricFamily(
        "fabriclab_events", "Events in the fabric's event log, by severity", labels=["severity"]
    )
    for sev, v in events.counts(SEVERITIES).items():
        logged.add_metric([sev], v)
    fams.append(logged)
    fams.extend(server_families(source.request("stats")))
    fams.extend(traffic_families(source))
    return fams


def net_families(source) -> list:
    """The faults in force on the other networks (admin op ``net``, action ``list``):
    none when the fabric was not brought up with --networks."""
    try:
        state = source.request("net", action="list")
    except InputError as e:
        if e.problems and e.problems[0].where == "net":  # not built
            return []
        raise
    g = GaugeMetricFamily(
        "fabriclab_net_faults_active",
        "Faults in force on the other networks: links down, link ends rate-capped, flaps",
        labels=["kind"],
    )
    g.add_metric(["down"], len(state["down"]))
    g.add_metric(["rate"], len(state["rates"]))
    g.add_metric(["flap"], len(state["flaps"]))
    return [g]


# The admin op ``stats`` (docs/protocol.md): which counts are MADs' outcomes.
MAD_OUTCOMES = ("answered", "forwarded", "timed_out", "dropped", "malformed")


def server_families(stats: dict) -> list:
    """The server's own counts since it came up, from the admin op ``stats``."""
    mads = CounterMetricFamily("fabriclab_server_mads", "MADs the fabric server received")
    mads.add_metric([], stats.get("mads", 0))
    out = CounterMetricFamily(
        "fabriclab_server_mad_outcomes", "What became of the MADs received", labels=["outcome"]
    )
    fams: list[CounterMetricFamily | GaugeMetricFamily] = [mads, out]
    for k in MAD_OUTCOMES:
        out.add_metric([k], stats.get(k, 0))
    by = CounterMetricFamily(
        "fabriclab_server_mads_by_class",
        "MADs the fabric server received, by management class and method (hex, as the "
        "MAD header carries them; a response's method with its R bit)",
        labels=["class", "method"],
    )
    for c in stats.get("classes", []):
        by.add_metric([str(c["class"]), str(c["method"])], c["mads"])
    fams.append(by)
    clients = GaugeMetricFamily("fabriclab_server_clients", "Tools attached to the fabric now")
    clients.add_metric([], stats.get("clients", 0))
    fams.append(clients)
    for k, v in stats.items():
        if k in (*MAD_OUTCOMES, "mads", "clients") or not isinstance(v, int | float):
            continue
        c = CounterMetricFamily(
            f"fabriclab_server_{k}", f"The fabric server's count '{k}' (admin op stats)"
        )
        c.add_metric([], v)
        fams.append(c)
    return fams


def traffic_families(source: Source) -> list:
    """The flows (admin op ``traffic list``'s summary): how many in each state, bytes
    sent and delivered, the running ones' rate; none on a fabric without traffic."""
    try:
        s = source.request("traffic", verb="list", args=[], options={"limit": 0})["summary"]
    except FabriclabError:
        return []
    flows = GaugeMetricFamily("fabriclab_flows", "Traffic flows, by state", labels=["state"])
    for k, v in s.get("states", {}).items():
        flows.add_metric([k], v)
    sent = CounterMetricFamily("fabriclab_traffic_sent_bytes", "Bytes the flows have sent")
    sent.add_metric([], s.get("sent", 0))
    got = CounterMetricFamily("fabriclab_traffic_delivered_bytes", "Bytes the flows have delivered")
    got.add_metric([], s.get("delivered", 0))
    rate = GaugeMetricFamily(
        "fabriclab_traffic_rate_bytes_per_second", "The running flows' rate together"
    )
    rate.add_metric([], s.get("rate", 0.0))
    return [flows, sent, got, rate]


def scrape_families(took: float) -> list:
    d = GaugeMetricFamily(
        "fabriclab_scrape_duration_seconds",
        "Seconds this scrape took until this line (every series before it)",
    )
    d.add_metric([], took)
    dd = GaugeMetricFamily(
        "infiniband_exporter_collector_duration_seconds",
        "Collector time duration.",
        labels=["collector"],
    )
    for c in ("ibnetdiscover", "switch", "hca"):
        dd.add_metric([c], took)
    return [d, dd]


class _Collected:
    """Metric families for ``generate_latest`` (anything with ``collect``)."""

    def __init__(self, fams: list):
        self.fams = fams

    def collect(self) -> list:
        return self.fams


def text(fams: list) -> bytes:
    """Metric families in the text format, by ``prometheus_client``."""
    return generate_latest(_Collected(fams))
