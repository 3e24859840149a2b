"""``/metrics``: the whole fabric in Prometheus's text format (version 0.0.4), its port
counters named exactly as treydock/infiniband_exporter names them (so that its Grafana
dashboards and recording rules work unchanged), and fabriclab's own series beside them
(``fabriclab_``: port states, nodes, faults, events, the server's health).

A full scrape of the 8,192-tray fabric is about 5.5 million samples, far too many for
``prometheus_client``'s generic collectors: the port families are written by
:mod:`.metrics_text` (label strings made here once per layout, values straight from the
state array) and streamed a piece at a time; the few small series are
``prometheus_client`` metric families (:mod:`.metrics_small`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from . import metrics_small
from .metrics_events import EventCounter
from .metrics_text import escape, family, family_chunks, gzipped, times4
from .source import Source
from .view import Layout, State

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Above this many ports a scrape is sent plain even to a scraper that takes gzip: at
# 259,000 ports (511 MB of text) compressing costs more than a second on top of the
# 1.5 s scrape (bench/api_metrics.py), far more than the bytes cost on a loopback or LAN.
GZIP_MAX_PORTS = 100_000
STATE_MAX_AGE = 0.0  # every scrape reads the state as it is then

# treydock/infiniband_exporter (v0.10.0) collectors/switch.go and hca.go: each counter of
# perfquery's extended view (``perfquery -x``, collectors/perfquery.go), its series name
# after ``infiniband_{switch,hca}_``, and the HELP text (``Infiniband switch port <X>``).
# PortXmitData and PortRcvData count 4-byte words: the exporter multiplies them by 4.
COUNTERS = (
    ("PortXmitData", "port_transmit_data_bytes_total"),
    ("PortRcvData", "port_receive_data_bytes_total"),
    ("PortXmitPkts", "port_transmit_packets_total"),
    ("PortRcvPkts", "port_receive_packets_total"),
    ("PortUnicastXmitPkts", "port_unicast_transmit_packets_total"),
    ("PortUnicastRcvPkts", "port_unicast_receive_packets_total"),
    ("PortMulticastXmitPkts", "port_multicast_transmit_packets_total"),
    ("PortMulticastRcvPkts", "port_multicast_receive_packets_total"),
    ("SymbolErrorCounter", "port_symbol_error_total"),
    ("LinkErrorRecoveryCounter", "port_link_error_recovery_total"),
    ("LinkDownedCounter", "port_link_downed_total"),
    ("PortRcvErrors", "port_receive_errors_total"),
    ("PortRcvRemotePhysicalErrors", "port_receive_remote_physical_errors_total"),
    ("PortRcvSwitchRelayErrors", "port_receive_switch_relay_errors_total"),
    ("PortXmitDiscards", "port_transmit_discards_total"),
    ("PortXmitConstraintErrors", "port_transmit_constraint_errors_total"),
    ("PortRcvConstraintErrors", "port_receive_constraint_errors_total"),
    ("LocalLinkIntegrityErrors", "port_local_link_integrity_errors_total"),
    ("ExcessiveBufferOverrunErrors", "port_excessive_buffer_overrun_errors_total"),
    ("VL15Dropped", "port_vl15_dropped_total"),
    ("PortXmitWait", "port_transmit_wait_total"),
    ("QP1Dropped", "port_qp1_dropped_total"),
)
BYTES = frozenset(("PortXmitData", "PortRcvData"))
# collectors/ibnetdiscover.go ``laneRates``: per lane {signalling, effective} Gb/s.  The
# exporter's own table, not fabriclab.ib.rates, so that the rate series equal what the
# exporter reports for the same link (HDR's lane is 50 here, 53.125 signalled in
# fabriclab.ib.rates).
LANE_RATES = {
    "SDR": (2.5, 2.0),
    "DDR": (5.0, 4.0),
    "QDR": (10.0, 8.0),
    "FDR10": (10.3125, 10.0),
    "FDR": (14.0625, 13.64),
    "EDR": (25.78125, 25.0),
    "HDR": (50.0, 50.0),
    "NDR": (100.0, 100.0),
    "XDR": (250.0, 250.0),
}


class Ports:
    """What one layout's scrapes share, made once: the rows the exporter exports (a
    switch's or an HCA's cabled ports, port 0 never: what ``ibnetdiscover --ports``
    shows connected) and their label strings, and every port's for the state series."""

    def __init__(self, layout: Layout):
        self.layout = layout
        num, peer, node = layout.port_num, layout.port_peer, layout.port_node
        switch = layout.node_switch[node]
        cabled = (num > 0) & (peer >= 0)
        self.sw = np.flatnonzero(cabled & switch)
        self.ca = np.flatnonzero(cabled & ~switch)
        self.every = np.flatnonzero(num > 0)
        pg = ["0x" + g for g in layout.ports["guid"]]
        self.guid = pg
        nums = layout.ports["num"]

        def lbl(rows: np.ndarray) -> list[str]:
            return [f'{{guid="{pg[r]}",port="{nums[r]}"}} ' for r in rows.tolist()]

        self.sw_labels = lbl(self.sw)
        self.ca_labels = lbl(self.ca)
        self.every_labels = lbl(self.every)
        self.ca_guid = [f'{{guid="{pg[r]}"}} ' for r in self.ca.tolist()]
        # the exporter's lanes and speed as cabled (a retrained link's come from the state)
        speeds = layout.speeds
        self.cabled_lanes = np.asarray(
            [int(w[:-1]) if w[:-1].isdigit() else 0 for w in layout.ports["width"]], dtype=np.int64
        )
        self.cabled_speed = np.asarray(
            [speeds.index(s) + 1 if s in speeds else 0 for s in layout.ports["speed"]],
            dtype=np.int64,
        )
        eff = [0.0] + [LANE_RATES.get(s, (0.0, 0.0))[1] for s in speeds]
        raw = [0.0] + [LANE_RATES.get(s, (0.0, 0.0))[0] for s in speeds]
        self.lane_eff = np.asarray(eff) * 1e9 / 8
        self.lane_raw = np.asarray(raw) * 1e9 / 8
        self.nodes = node_info(layout)
        self._info_lids: np.ndarray | None = None
        self._info: bytes = b""

    def rates(self, state: State, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The effective and raw rates (bytes/s) of ``rows`` as the exporter reckons
        them: the trained width x the lane rate of the trained speed."""
        lanes = state.col("lanes")[rows].astype(np.int64)
        lanes = np.where(lanes > 0, lanes, self.cabled_lanes[rows])
        speed = state.col("speed")[rows].astype(np.int64)
        speed = np.where(speed > 0, speed, self.cabled_speed[rows])
        return lanes * self.lane_eff[speed], lanes * self.lane_raw[speed]

    def info(self, state: State) -> bytes:
        """The info families (their labels carry LIDs: made again when a LID moves)."""
        lids = state.col("lid")
        if self._info_lids is None or not np.array_equal(lids, self._info_lids):
            self._info = info_families(self, lids.tolist())
            self._info_lids = lids.copy()
        return self._info


def info_families(p: Ports, lids: list[int]) -> bytes:
    """``infiniband_{switch,hca}_info`` and ``_uplink_info``, with the exporter's labels
    (collectors/switch.go, hca.go: the node's description as ibnetdiscover shows it, its
    LID, each connected port's peer), label names in sorted order as its Go client
    writes them."""
    lay = p.layout
    desc = [escape(d) for d in lay.nodes["desc"]]
    node, peer, nums = lay.ports["node"], lay.ports["peer"], lay.ports["num"]
    kind = lay.node_switch
    out = []
    for who, rows in (("switch", p.sw), ("hca", p.ca)):
        info: dict[str, str] = {}
        up = []
        for r in rows.tolist():
            n, q = node[r], peer[r]
            g = p.guid[r]
            if who == "switch":  # guid, lid, switch
                info.setdefault(g, f'{{guid="{g}",lid="{lids[r]}",switch="{desc[n]}"}} ')
                mine = f'guid="{g}",port="{nums[r]}",switch="{desc[n]}"'
            else:  # guid, hca, lid
                info.setdefault(g, f'{{guid="{g}",hca="{desc[n]}",lid="{lids[r]}"}} ')
                mine = f'guid="{g}",hca="{desc[n]}",port="{nums[r]}"'
            qn = node[q]
            up.append(
                f'{{{mine},uplink="{desc[qn]}",'
                f'uplink_guid="{p.guid[q]}",uplink_lid="{lids[q]}",uplink_port="{nums[q]}",'
                f'uplink_type="{"SW" if kind[qn] else "CA"}"}} '
            )
        title = "switch" if who == "switch" else "HCA"
        out.append(
            family(
                f"infiniband_{who}_info",
                f"Infiniband {title} information",
                "gauge",
                list(info.values()),
                ["1"] * len(info),
            )
        )
        out.append(
            family(
                f"infiniband_{who}_uplink_info",
                f"Infiniband {title} uplink information",
                "gauge",
                up,
                ["1"] * len(up),
            )
        )
    return b"".join(out)


def node_info(lay: Layout) -> bytes:
    """``fabriclab_node_info``: every node, with where it sits in the cluster."""
    cols = ("name", "desc", "kind", "tier", "role", "domain", "host", "hca", "model")
    n = lay.nodes
    labels = []
    for i, g in enumerate(n["guid"]):
        kv = ",".join(f'{c}="{escape(str(n[c][i]))}"' for c in cols)
        labels.append(f'{{guid="0x{g}",{kv}}} ')
    return family(
        "fabriclab_node_info",
        "A node of the fabric: its name, kind (switch or ca), tier, role, NVLink domain, "
        "host and HCA",
        "gauge",
        labels,
        ["1"] * len(labels),
    )


class Metrics:
    """The scrapes of one Source: the layout's precomputed labels and the events
    counted so far."""

    def __init__(self, source: Source):
        self.source = source
        self.events = EventCounter(source)

    def ports(self) -> Ports:
        return self.source.derived(Ports)

    def scrape(self) -> Iterator[bytes]:
        """The whole exposition, a family (or a few small ones) at a time."""
        t0 = time.perf_counter()
        p = self.ports()
        state = self.source.state(STATE_MAX_AGE)
        # the small series read first too: a fabric gone answers an error, not half a scrape
        small = metrics_small.text(metrics_small.small_families(self.source, state, self.events))
        yield from self.port_families(p, state)
        yield p.info(state)
        yield p.nodes
        yield small
        took = time.perf_counter() - t0
        yield metrics_small.text(metrics_small.scrape_families(took))

    def port_families(self, p: Ports, state: State) -> Iterator[bytes]:
        for counter, suffix in COUNTERS:
            col = state.col(counter)
            for who, rows, labels in (("switch", p.sw, p.sw_labels), ("hca", p.ca, p.ca_labels)):
                values = times4(col[rows]) if counter in BYTES else col[rows]
                title = "switch" if who == "switch" else "HCA"
                yield from family_chunks(
                    f"infiniband_{who}_{suffix}",
                    f"Infiniband {title} port {counter}",
                    "counter",
                    labels,
                    values,
                )
        eff, raw = p.rates(state, p.sw)
        yield from family_chunks(
            "infiniband_switch_port_rate_bytes_per_second",
            "Infiniband switch port rate",
            "gauge",
            p.sw_labels,
            eff,
        )
        yield from family_chunks(
            "infiniband_switch_port_raw_rate_bytes_per_second",
            "Infiniband switch port raw rate",
            "gauge",
            p.sw_labels,
            raw,
        )
        eff, raw = p.rates(state, p.ca)
        yield from family_chunks(
            "infiniband_hca_rate_bytes_per_second", "Infiniband HCA rate", "gauge", p.ca_guid, eff
        )
        yield from family_chunks(
            "infiniband_hca_raw_rate_bytes_per_second",
            "Infiniband HCA raw rate",
            "gauge",
            p.ca_guid,
            raw,
        )
        # node_exporter's numbering: the number sysfs's state and phys_state files start
        # with ("4: ACTIVE", "5: LinkUp"; prometheus/procfs sysfs/class_infiniband.go
        # parseState), which are PortInfo's LinkState and PhysLinkState (IBA 14.2.5.6)
        yield from family_chunks(
            "fabriclab_port_state_id",
            "A port's logical state, numbered as node_exporter's node_infiniband_state_id "
            "(1 Down, 2 Initializing, 3 Armed, 4 Active, 5 ActiveDefer: PortInfo LinkState)",
            "gauge",
            p.every_labels,
            state.col("state")[p.every],
        )
        yield from family_chunks(
            "fabriclab_port_physical_state_id",
            "A port's physical state, numbered as node_exporter's "
            "node_infiniband_physical_state_id (1 Sleep, 2 Polling, 3 Disabled, "
            "4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest)",
            "gauge",
            p.every_labels,
            state.col("phys")[p.every],
        )


def install(app: FastAPI, source: Source) -> None:
    """Add ``/metrics`` to ``app``."""
    m = Metrics(source)
    app.state.metrics = m

    error = {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"error": {"type": "string"}},
                "required": ["error"],
            }
        }
    }

    @app.get(
        "/metrics",
        tags=["metrics"],
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "Prometheus's text format, version 0.0.4",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            503: {"description": "The fabric is not up", "content": error},
        },
    )
    def metrics(request: Request) -> StreamingResponse:
        """The whole fabric in Prometheus's text format (0.0.4), gzipped when asked."""
        chunks = m.scrape()
        first = next(chunks)  # errors reading the fabric become answers, not torn streams
        body: Iterator[bytes] = _chain(first, chunks)
        headers = {}
        small = source.layout().port_count <= GZIP_MAX_PORTS
        if small and "gzip" in request.headers.get("accept-encoding", ""):
            body = gzipped(body)
            headers["Content-Encoding"] = "gzip"
        return StreamingResponse(body, media_type=CONTENT_TYPE, headers=headers)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest
