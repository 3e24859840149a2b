"""The fabric server beyond discovery: a cross-check against the Debian ibsim, many
tools at once, garbage and dying clients, remote (UDP) mode, links taken down and up
with the real ibportstate (and OpenSM reacting to the traps), and the CLI around it."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import SPECS
from fabric_server import fabric_up
from helpers import alive, counter, free_udp_ports, no_timestamp, rendered, wait_for
from realtools import ibsim
from simclient import SimClient, dr_smp, fuzz_requests, lid_mad

from fabriclab.formats import ibsim_net
from fabriclab.ib import simwire
from fabriclab.ib.mad.consts import Attr
from fabriclab.ib.mad.layouts import PORT_COUNTERS_EXT
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec

pytestmark = pytest.mark.realtools
THREE = str(SPECS / "three-tier-hdr.yaml")


# The same-net-file comparison: (spec, the CA the tools run at, the CA and the switch they
# ask).  Small fabrics (10 nodes), so both servers and both OpenSM sweeps take seconds.
SAME_NET = {
    "hdr": (str(SPECS / "lab-hdr.yaml"), "hdr-worker2:mlx5_0", "hdr-worker1:mlx5_0"),
    "ndr": ("lab", "sched-worker2:mlx5_0", "sched-worker1:mlx5_0"),
}
# ibsim parses NDR from 0.12 on (sim_net.c of ibsim 0.12 added the "NDR" token; 0.10
# stops at HDR, see fabriclab.formats.ibsim_net.KNOWN_SPEEDS)
NDR_IBSIM = (0, 12)


def _queries(ca: int, sw: int) -> list[tuple[str, ...]]:
    """What both servers are asked, in this order, after the same OpenSM sweep: the
    counters of a CA port and a switch port are reset first, so what the perfqueries at
    the end read is the fixed exchange in between (the SMPs and PMA MADs listed)."""
    return [
        ("perfquery", "-R", str(ca), "1"),
        ("perfquery", "-x", "-R", str(ca), "1"),
        ("perfquery", "-R", str(sw), "1"),
        ("ibnetdiscover",),
        ("iblinkinfo",),
        ("ibroute", str(sw)),
        ("smpquery", "nodeinfo", str(ca)),
        ("smpquery", "portinfo", str(ca), "1"),
        ("smpquery", "nodeinfo", str(sw)),
        ("smpquery", "portinfo", str(sw), "1"),
        ("smpquery", "switchinfo", str(sw)),
        ("perfquery", str(ca), "1"),
        ("perfquery", "-x", str(ca), "1"),
        ("perfquery", str(sw), "1"),
    ]


def _fields(text: str) -> dict[str, str]:
    """smpquery/perfquery output as {field: value}.  The capability names the tools print
    under a CapMask (tab-indented lines) are left out: they decode the hex value, which
    is compared."""
    out = {}
    for line in text.splitlines():
        if m := re.match(r"([^\t.:][^.:]*):\.*(.*)$", line):
            out[m.group(1)] = m.group(2)
    return out


def _differences(theirs: str, ours: str) -> dict[str, tuple[str | None, str | None]]:
    """The fields whose values differ, {field: (ibsim's, fabriclab's)}, None where only
    one prints the field; the fields both print come in the same order (asserted)."""
    a, b = _fields(theirs), _fields(ours)
    assert [k for k in a if k in b] == [k for k in b if k in a], (theirs, ours)
    return {k: (a.get(k), b.get(k)) for k in {**a, **b} if a.get(k) != b.get(k)}


@pytest.mark.parametrize("rate", sorted(SAME_NET))
def test_same_net_file_on_ibsim_and_fabriclab(real_tools, toolset, rate, tmp_path):
    """The same fabric served by the real ibsim (from fabriclab's net file) and by
    fabriclab, with each tool set (ibsim 0.10 / rdma-core 44, ibsim 0.12 / rdma-core 56),
    at HDR and (with ibsim 0.12, which parses it) NDR: after the same real OpenSM sweep,
    the real ibnetdiscover, iblinkinfo and ibroute print the same lines, perfquery reads
    the same counters after the same exchange, and smpquery the same attributes, except
    what ibsim does not model (each difference asserted exactly below, with its cause)."""
    if rate == "ndr" and toolset.ibsim < NDR_IBSIM:
        pytest.skip(f"{toolset}: ibsim before 0.12 parses no NDR (an NDR link comes up SDR)")
    spec, at, asked = SAME_NET[rate]
    cluster = build(load_spec(spec))
    start, _ = find_port(cluster, at)
    ca, _ = find_port(cluster, asked)
    sw = ca.peer.node
    queries = _queries(ca.lid, sw.lid)
    net = tmp_path / "fabric.net"
    net.write_text(ibsim_net.render(cluster.fabric))
    with ibsim(net, tmp_path, ibsim_net.limits(cluster.fabric).args(), toolset) as sim:
        sim.opensm_once(start.node.desc)
        theirs = [sim.run(start.node.desc, *q) for q in queries]
    with fabric_up(spec, tmp_path / "fl") as f:
        there, inside = toolset.workdir(f.workdir)
        osm = {"OSM_TMP_DIR": str(f.workdir), "OSM_CACHE_DIR": str(f.workdir)}
        f.run(
            at,
            "opensm",
            "-o",
            "-e",
            "-f",
            f"{inside}/osm.log",
            "-d",
            "0",
            tools=toolset,
            extra_env=osm,
        )
        assert "SUBNET UP" in (there / "osm.log").read_text()
        ours = [f.run(at, *q, tools=toolset) for q in queries]
        # the CA's PortCountersExtended as fabriclab answers it, read off the wire
        with SimClient(f.name, f.tool_env(at)["SIM_HOST"]) as client:
            mad = lid_mad(4, Attr.PORT_COUNTERS_EXT, data=PORT_COUNTERS_EXT.pack({"PortSelect": 1}))
            status, reply = client.request(mad, dlid=ca.lid, dqp=1)
        assert status == 0
        wire = PORT_COUNTERS_EXT.unpack(reply[64:])
    got = {}
    for q, t, o in zip(queries, theirs, ours, strict=True):
        assert t.returncode == 0, (q, t.stderr)
        got[" ".join(q)] = (t.stdout, o.stdout)
    # ibsim gives a CA's port N the GUID node + N (sim_net.c); a ConnectX port carries
    # the node GUID: map ibsim's back, so the rest compares line for line
    fixed = {}
    for k, (t, o) in got.items():
        for n in cluster.fabric.cas():
            t = t.replace(f"{n.guid + 1:x}", f"{n.guid:x}")
        fixed[k] = (t, o)
    assert fixed != got  # the difference was there, and is now accounted for
    out = {k: (t, o) for k, (t, o) in fixed.items() if not k.startswith("perfquery -")}

    # ibnetdiscover and ibroute (the leaf's LFT, as the same OpenSM programmed it): the same
    assert no_timestamp(out["ibnetdiscover"][1]) == no_timestamp(out["ibnetdiscover"][0])
    assert out[f"ibroute {sw.lid}"][1] == out[f"ibroute {sw.lid}"][0]
    rate_token = "4xNDR" if rate == "ndr" else "4xHDR"
    assert re.search(rf"{rate_token}$", out["ibnetdiscover"][1], re.M)
    # iblinkinfo: the same lines but for its width hint.  ibsim's ports all claim
    # LinkWidthSupported 1X|4X|8X|12X|2X (its default, sim_net.c), so iblinkinfo says
    # "Could be 12X" on every 4X link; a Quantum/ConnectX port supports 1X|4X (|2X from
    # NDR on; fabriclab.ib.devices), so with fabriclab the hint is empty.
    # ibsim 0.12 also claims 106.25 Gbps (NDR) supported on every port, so on an HDR
    # link iblinkinfo adds "Could be 106.25 Gbps" (see LinkSpeedExtSupported below)
    v12 = toolset.ibsim >= (0, 12)
    hint = "(Could be 12X Could be 106.25 Gbps)" if v12 and rate == "hdr" else "(Could be 12X )"
    link_t, link_o = out["iblinkinfo"]
    assert link_t.count(hint) == 2 * cluster.fabric.link_count(), link_t
    assert "Could be" not in link_o
    assert link_o == link_t.replace(hint, "( )")

    # smpquery and perfquery: every field both print, compared; the ones that differ are
    # exactly these, (ibsim's, fabriclab's).  ibsim serves fixed templates (sim_net.c:
    # hcanodeinfo, swnodeinfo, switchinfo and its PortInfo defaults) and keeps of an SM's
    # PortInfo Set only the LID, SM LID, LMC, HOQLife, states, OperVLs, GID prefix and
    # speeds (sim_mad.c do_portinfo); fabriclab serves what a real ConnectX/Quantum
    # reports (fabriclab.ib.devices cites each) and keeps what OpenSM sets:
    ca_nodeinfo = {
        "PartCap": ("64", "128"),  # ibsim's default table; ConnectX: 128 P_Keys
        "Revision": ("0x000000a1", "0x00000000"),  # ibsim's fixed revision; ConnectX: 0
    }
    sw_nodeinfo = {
        "PartCap": ("8", "1"),  # ibsim's default; a Quantum switch's port 0: 1
        "Revision": ("0x000000a1", "0x000000a0"),  # Quantum's revision
    }
    ndr = rate == "ndr"
    # LinkWidthSupported: ibsim enables 1X|4X and claims every width; fabriclab a real
    # port's (2X from NDR on: CapabilityMask2 IsLinkWidth2xSupported, devices.py)
    widths = {
        "LinkWidthSupported": (
            "1X or 4X or 8X or 12X or 2X",
            "1X or 4X or 2X" if ndr else "1X or 4X",
        ),
        **({"LinkWidthEnabled": ("1X or 4X", "1X or 4X or 2X")} if ndr else {}),
    }
    # what every port of both differs in: ibsim's MTU cap is 2048 (its template), a real
    # HDR/NDR port's 4096; RespTimeVal and the error thresholds stay at ibsim's template
    # 0 (do_portinfo does not keep them), fabriclab keeps what OpenSM sets (8, 8:
    # opensm's local_phy_errors_threshold/overrun_errors_threshold) and a ConnectX's 16
    port_common = {
        **widths,
        "NeighborMTU": ("2048", "4096"),
        "MtuCap": ("2048", "4096"),
        "RespTimeVal": ("0", "16"),
        "LocalPhysErr": ("0", "8"),
        "OverrunErr": ("0", "8"),
    }
    ca_portinfo = {
        # ibsim's CA capability mask (0.12 dropped IsVendorClassSupported); a real
        # ConnectX-6 / ConnectX-7 (ibstat on real hardware, devices.py)
        "CapMask": ("0x40c048" if v12 else "0x50c048", "0xa751e848" if ndr else "0x2651e848"),
        # ibsim's template value (do_portinfo does not keep the lease); OpenSM's 0
        "MkeyLeasePeriod": ("4089", "0"),
        "HoqLife": ("0", "31"),  # a ConnectX reports 31 (infinite); ibsim 0
        "GuidCap": ("32", "8"),  # ibsim's default GUID table; ConnectX: 8
        # OpenSM sets 18 (subnet_timeout); do_portinfo does not keep it: ibsim's 31
        "SubnetTimeout": ("31", "18"),
        **port_common,
    }
    if v12 and not ndr:
        # ibsim 0.12 claims NDR on every port (CapabilityMask2 NDR bit, 106.25 Gbps
        # supported); a ConnectX-6 / Quantum HDR port does not
        ca_portinfo["CapabilityMask2"] = ("0x430", "0x30")
    sw_portinfo = {
        **port_common,
        # OpenSM turns partition enforcement on where SwitchInfo says it is supported:
        # a Quantum's does (below), ibsim's does not
        "PartEnforceInb": ("0", "1"),
        "PartEnforceOutb": ("0", "1"),
    }
    if v12 and not ndr:
        hdr_ext = "14.0625 Gbps or 25.78125 Gbps or 53.125 Gbps"
        for d in (ca_portinfo, sw_portinfo):
            d["LinkSpeedExtSupported"] = (f"{hdr_ext} or 106.25 Gbps", hdr_ext)
    switchinfo = {
        # ibsim's defaults vs a Quantum's SwitchInfo (devices.py): multicast default
        # ports 255 (none), partition enforcement and optional SL-to-VL mapping supported,
        # no raw packet filtering
        "DefMcastPrimPort": ("0", "255"),
        "DefMcastNotPrimPort": ("0", "255"),
        "StateChange": ("0", "1"),
        "OptSLtoVLMapping": ("0", "1"),
        "InboundPartEnf": ("0", "1"),
        "OutboundPartEnf": ("0", "1"),
        "FilterRawInbound": ("1", "0"),
        "FilterRawOutbound": ("1", "0"),
    }
    if not v12:
        switchinfo["LinearFdbCap"] = ("30720", "49152")  # ibsim 0.10's cap; 0.12 and Quantum: 49152
    c, s = ca.lid, sw.lid

    def pm_header(what: str, lid: int, sw_cap: bool) -> tuple[str, str]:
        # the PMA ClassPortInfo CapabilityMask: ibsim's 0x1200 (0x1300 on a switch:
        # AllPortSelect); a ConnectX's 0x5A00 / a Quantum's 0x5B00 (devices.py)
        t, o = ("0x1300", "0x5B00") if sw_cap else ("0x1200", "0x5A00")
        return (f" Lid {lid} port 1 (CapMask: {t}{what}", f" Lid {lid} port 1 (CapMask: {o}{what}")

    want = {
        f"smpquery nodeinfo {c}": ca_nodeinfo,
        f"smpquery portinfo {c} 1": ca_portinfo,
        f"smpquery nodeinfo {s}": sw_nodeinfo,
        f"smpquery portinfo {s} 1": sw_portinfo,
        f"smpquery switchinfo {s}": switchinfo,
        # the counters after the resets and the same exchange: equal, all of them
        f"perfquery {c} 1": {"# Port counters": pm_header(")", c, False)},
        f"perfquery {s} 1": {"# Port counters": pm_header(")", s, True)},
    }
    for k, d in want.items():
        assert _differences(*out[k]) == d, k
    pc = _fields(out[f"perfquery {c} 1"][1])
    assert int(pc["PortRcvPkts"]) > 0 and int(pc["PortXmitPkts"]) > 0  # the exchange counted

    # perfquery -x: fabriclab's 64-bit counters equal the 32-bit ones both read; it counts
    # every MAD as unicast, which ibsim does not model (sim_mad.c counts a MAD in
    # ext_xmit/recv_data and _pkts only: its unicast counters stay 0)
    xt, xo = _fields(fixed[f"perfquery -x {c} 1"][0]), _fields(fixed[f"perfquery -x {c} 1"][1])
    for k in ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts"):
        assert xo[k] == pc[k], k
    assert xo["PortUnicastXmitPkts"] == pc["PortXmitPkts"]
    assert xo["PortUnicastRcvPkts"] == pc["PortRcvPkts"]
    assert (xt["PortUnicastXmitPkts"], xt["PortUnicastRcvPkts"]) == ("0", "0")
    # ibsim's extended reset never clears its 64-bit PortRcvPkts (sim_mad.c pc_ext_reset:
    # the GS_PC_EXT_RECV_PKTS bit clears ext_xmit_pkts, again), so it stays ahead of its
    # own 32-bit one; the other three agree with its 32-bit counters
    assert int(xt["PortRcvPkts"]) > int(pc["PortRcvPkts"])
    for k in ("PortXmitData", "PortRcvData", "PortXmitPkts"):
        assert xt[k] == pc[k], k
    # a ConnectX-7 advertises the additional extended counters (PMA CapabilityMask2
    # bit 1, devices.py), so perfquery -x prints them too, all zero after the reset.
    # But the last three (VL15Dropped, PortXmitWait, QP1Dropped: MAD bytes 224-247)
    # never reach the tool: libumad2sim's receiver thread (umad2sim.c, 0.10 and 0.12)
    # reads each answer into a buffer of sizeof(struct sim_request) = 288 bytes, of
    # which umad2sim_read copies at most count - umad_size() = 288 - 64 = 224 MAD bytes,
    # so the tool prints whatever that malloc'd buffer held there.  What fabriclab sent
    # is read off the wire instead (``wire``, below): zero.
    cut = ("VL15Dropped", "PortXmitWait", "QP1Dropped")
    extra = {k: v for k, v in xo.items() if k not in xt}
    if ndr:
        assert "CapMask2: 0x0000002)" in fixed[f"perfquery -x {c} 1"][1]
        where = {n: 64 + off // 8 for n, off, _ in PORT_COUNTERS_EXT.fields}
        assert [where[k] for k in cut] == [224, 232, 240]
        errors = {k: v for k, v in extra.items() if k not in cut}
        assert len(errors) == 12 and set(errors.values()) == {"0", "0x00000000"}, extra
        assert set(extra) == set(errors) | set(cut)  # printed, whatever they read
        assert all(wire[k] == 0 for k in cut), wire
    else:
        assert extra == {}


def test_32_tools_at_once(real_tools, tmp_path):
    """32 real tool processes against one server at the same time, each answered
    correctly: directed-route discovery, LID-routed SMPs and PMA queries mixed."""
    with fabric_up("gb200-su", tmp_path, sm=True) as f:
        hosts = [t.host for t in f.cluster.trays][::4][:32]
        want = {}
        for h in hosts[:12]:
            want[h] = rendered(f.cluster, h)

        def job(i_host):
            i, h = i_host
            if i < 12:
                return h, "discover", f.run(h, "ibnetdiscover").stdout
            if i < 22:
                return h, "perf", f.run(h, "perfquery", "-x").stdout
            sw = f.cluster.fabric.switches()[i % len(f.cluster.fabric.switches())]
            return h, ("smp", sw), f.run(h, "smpquery", "nodedesc", str(sw.lid)).stdout

        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(job, enumerate(hosts)))
    assert len(results) == 32
    for h, kind, out in results:
        if kind == "discover":
            assert no_timestamp(out) == want[h]
        elif kind == "perf":
            assert re.search(r"PortXmitData:\.+\d+", out)
        else:
            assert kind[1].desc in out


def test_garbage_and_dying_clients_leave_the_server_answering(real_tools, tmp_path):
    """Control-channel garbage, thousands of broken datagrams from an attached client,
    and six tools killed while attached: the server answers correctly throughout, and
    closes the dead tools' data sockets."""
    with fabric_up("lab", tmp_path, sm=True) as f:
        inst = f.instance()
        rng = random.Random(1234)
        # control channel garbage: wrong sizes, bad magic, unknown types, unknown clients
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(simwire.sockname(f.name, f"ctl{os.getpid() + 7}"))
            s.settimeout(1)
            for _ in range(300):
                raw = rng.choice(
                    [
                        rng.randbytes(rng.randrange(200)),
                        simwire.Ctl(
                            rng.randrange(50), rng.randrange(20), 0, rng.randbytes(64)
                        ).encode(),
                    ]
                )
                s.sendto(raw, simwire.sockname(f.name, "ctl"))
        # a connected client sending a few thousand broken datagrams
        with SimClient(f.name, "sched-worker2", timeout=0.2) as c:
            answers = 0
            for raw in fuzz_requests(rng, 4000):
                c.data.settimeout(5)
                c.send_raw(raw)
                c.data.settimeout(0.0)
                try:
                    while True:
                        c.recv_raw()
                        answers += 1
                except (TimeoutError, BlockingIOError):
                    pass
            c.data.settimeout(1)
            try:  # the last answers
                while True:
                    c.recv_raw()
                    answers += 1
            except TimeoutError:
                pass
            assert answers > 1000  # well-formed ones are answered (or timed out) as usual
            c.data.settimeout(5)
            status, reply = c.request(dr_smp(0x11, [1]))  # still answered, correctly
            leaf = f.cluster.fabric.find("MF0;LAB-IBLEAF-01:MQM9701/U1")
            assert status == 0 and reply[64 + 12 : 64 + 20] == leaf.guid.to_bytes(8, "big")
            fuzzer = f"@{f.name}:out{c.id}"
        # gone when its disconnect is handled (its socket name may be reused after)
        wait_for(
            lambda: not [x for x in _out_sockets(f.name) if x.rstrip("@") == fuzzer],
            10,
            "the fuzzing client's data socket closed",
        )
        # tools killed while attached: ibping servers, each waiting for pings on its
        # umad device, SIGKILLed once the server holds a data socket for each
        before = set(_out_sockets(f.name))  # other clients' (OpenSM's, through umad2sim)

        def theirs() -> set[str]:
            return set(_out_sockets(f.name)) - before

        env = f.tool_env("sched-worker1")
        procs = [
            subprocess.Popen(
                ["ibping", "-S"],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(6)
        ]
        try:
            wait_for(lambda: len(theirs()) == 6, 30, lambda: f"six tools attached: {theirs()}")
            assert [p.poll() for p in procs] == [None] * 6  # all still at work
        finally:
            for p in procs:
                p.send_signal(signal.SIGKILL)
                p.wait()
        # their data sockets are closed once the server notices they are gone
        wait_for(
            lambda: not theirs(),
            10,
            lambda: f"the dead tools' data sockets closed: {theirs()}",
            interval=0.2,
        )
        assert inst.alive()
        assert no_timestamp(f.run("sched-worker1", "ibnetdiscover").stdout) == rendered(
            f.cluster, "sched-worker1"
        )


def _out_sockets(name: str) -> list[str]:
    with open("/proc/net/unix") as fh:
        return [line.split()[-1] for line in fh if f"@{name}:out" in line]


def test_sma_semantics(real_tools, tmp_path):
    """What a real SMA answers to what a real SMA refuses (14.2.5): invalid port numbers
    and table blocks, Sets of read-only attributes, state changes out of order."""
    with fabric_up("lab", tmp_path) as f, SimClient(f.name, "sched-worker1") as c:
        # NodeInfo through the CA and through the leaf (LocalPortNum follows)
        st, r = c.request(dr_smp(0x11, [1, 9]))  # the spine, reached through leaf port 9
        assert st == 0 and r[3] == 0x81 and r[64 + 2] == 2 and r[64 + 36] == 1
        # an unknown attribute: "method/attribute unsupported" with the D bit set
        st, r = c.request(dr_smp(0x1234, [1]))
        assert st == 0 and r[4:6] == (0x8000 | 0x000C).to_bytes(2, "big")
        # Set of NodeInfo (read only)
        st, r = c.request(dr_smp(0x11, [1], method=2))
        assert r[4:6] == (0x8000 | 0x000C).to_bytes(2, "big")
        # PortInfo of a port the switch does not have: invalid field
        st, r = c.request(dr_smp(0x15, [1], mod=99))
        assert r[4:6] == (0x8000 | 0x001C).to_bytes(2, "big")
        # ACTIVE straight from INIT is refused; ARMED then ACTIVE is accepted
        from fabriclab.ib.mad.layouts import PORT_INFO

        st, pi = c.request(dr_smp(0x15, [1], mod=3))
        cur = bytes(pi[64:128])
        assert PORT_INFO.get(cur, "LinkState") == 2
        act = PORT_INFO.pack({"LinkState": 4}, base=cur)
        st, r = c.request(dr_smp(0x15, [1], mod=3, method=2, data=act))
        assert r[4:6] == (0x8000 | 0x001C).to_bytes(2, "big")
        assert PORT_INFO.get(r[64:128], "LinkState") == 2
        # a directed route through a CA (it cannot forward) goes nowhere: timeout
        st, r = c.request(dr_smp(0x11, [1, 1, 1]))
        assert st == 110
        # LID routing needs forwarding tables: none before an SM ran
        st, r = c.request(lid_mad(0x01, 0x11), dlid=1)
        assert st == 110


def test_remote_mode_over_udp(real_tools, tmp_path):
    """Trays in other containers or hosts attach over UDP (IBSIM_SERVER_NAME/PORT)."""
    port = free_udp_ports(40)
    with fabric_up("lab", tmp_path, listen=f"127.0.0.1:{port}") as f:
        env = f.tool_env("sched-worker2:mlx5_1")
        assert env["IBSIM_SERVER_NAME"] == "127.0.0.1" and env["IBSIM_SERVER_PORT"] == str(port)
        out = f.run("sched-worker2:mlx5_1", "ibnetdiscover").stdout
        assert no_timestamp(out) == rendered(f.cluster, "sched-worker2:mlx5_1")


def test_ibportstate_takes_a_link_down_and_opensm_reacts(real_tools, toolset, tmp_path):
    """The real ibportstate disables a leaf port: both ends go down, the switch traps to
    OpenSM, which resweeps; enabling it brings the link back to ACTIVE.  With each tool
    set: rdma-core 56 no longer opens a local port that is DOWN, so the HCA behind the
    disabled port cannot query itself there (44 can)."""
    with fabric_up("lab", tmp_path, sm=True) as f:
        leaf = f.cluster.fabric.find("MF0;LAB-IBLEAF-01:MQM9701/U1")
        f.run("sched-worker1", "ibportstate", str(leaf.lid), "5", "disable", tools=toolset)

        def link(port: int) -> str:
            out = f.run("sched-worker1", "iblinkinfo", "--switches-only", tools=toolset).stdout
            return next(
                line for line in out.splitlines() if re.match(rf"\s+{leaf.lid}\s+{port}\[", line)
            )

        assert "Disabled" in link(5)
        assert "Active" in link(4)
        # the trap reached OpenSM, which swept again
        f.swept_after_trap(leaf.lid, timeout=20)
        # the peer HCA sees its link down: ibstat reads libumad2sim's sysfs, which every
        # release opens
        st = f.run("sched-worker2", "ibstat", tools=toolset).stdout
        assert re.search(r"^\s+State: Down$", st, re.M), st
        assert re.search(r"^\s+Physical state: Polling$", st, re.M), st
        smp = f.run(
            "sched-worker2", "smpquery", "-D", "portinfo", "0", "1", tools=toolset, check=False
        )
        if toolset.rdma_core >= 56:
            # libibumad 56 picks a port through umad_get_smi_gsi_pairs, which skips a port
            # whose state is DOWN (umad_check_active): the tool cannot open its own port
            assert smp.returncode != 0, (str(toolset), smp.stdout)
            assert "Can't open UMAD port" in smp.stderr, (str(toolset), smp.stderr)
        else:  # rdma-core 44 opens the port whatever its state and asks it
            assert re.search(r"PhysLinkState:\.+Polling", smp.stdout), (str(toolset), smp)
        f.run("sched-worker1", "ibportstate", str(leaf.lid), "5", "enable", tools=toolset)
        wait_for(lambda: "Active" in link(5), 30, "the leaf's port 5 Active again", interval=0.5)
        perf = f.run("sched-worker1", "perfquery", str(leaf.lid), "5", tools=toolset).stdout
        assert counter(perf, "LinkDownedCounter") == 1


def test_exec_shims_and_errors(real_tools, tmp_path):
    with fabric_up("lab", tmp_path) as f:
        r = f.fabriclab("exec", "--name", f.name, "sched-worker2:mlx5_2", "--", "ibnetdiscover")
        assert r.returncode == 0
        assert (
            "# Initiated from node " + f"{f.cluster.fabric.find('sched-worker2 mlx5_2').guid:016x}"
            in r.stdout
        )
        # one-line errors, never a traceback
        for args, msg in [
            (
                ["exec", "--name", f.name, "nosuch-tray", "--", "ibnetdiscover"],
                "no tray, CA or node",
            ),
            (
                ["exec", "--name", f.name, "sched-worker1", "--", "no-such-tool-x"],
                "command not found",
            ),
            (
                ["exec", "--name", "never-started", "sched-worker1", "--", "ibnetdiscover"],
                "no fabric named",
            ),
            (["up", "lab", "--name", f.name], "already up"),
            (["down", "--name", "never-started"], "no fabric named"),
            (["up", "lab", "--name", "a/b"], "without '/'"),
        ]:
            r = f.fabriclab(*args)
            assert r.returncode == 2, (args, r.stderr)
            assert msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
            assert all(line.startswith("error: ") for line in r.stderr.strip().splitlines())
        st = f.fabriclab("status")
        assert st.returncode == 0 and f.name in st.stdout and "lab" in st.stdout
        # shims: a bin directory that makes a shell on this machine look like the tray
        bindir = tmp_path / "bin"
        r = f.fabriclab("shims", "--name", f.name, "sched-worker2", str(bindir))
        assert r.returncode == 0, r.stderr
        env = {k: v for k, v in f.env.items() if k not in ("LD_PRELOAD",)}
        env["PATH"] = f"{bindir}:{env['PATH']}"
        out = subprocess.run(
            ["sh", "-c", "sudo ibnetdiscover"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert no_timestamp(out.stdout) == rendered(f.cluster, "sched-worker2")
        smi = subprocess.run(
            [
                "sh",
                "-c",
                "nvidia-smi --query-gpu=fabric.clusterUuid,fabric.cliqueId --format=csv,noheader",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert smi.stdout.splitlines() == ["7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91, 1"] * 4
        assert (bindir / "perfquery").exists() and os.access(bindir / "perfquery", os.X_OK)


def test_foreground_up_stops_cleanly_on_sigint(real_tools, tmp_path):
    """'fabriclab up' in the foreground: Ctrl-C (SIGINT) stops it, says what it served,
    and leaves no record behind; its OpenSM goes with it."""
    env = {**os.environ, "FABRICLAB_STATE_DIR": str(tmp_path / "state")}
    name = f"flfg{os.getpid()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabriclab.cli", "up", "lab", "--name", name, "--sm"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    record = tmp_path / "state" / f"{name}.json"
    log = tmp_path / "state" / f"{name}.opensm" / "opensm.log"

    def subnet_up() -> bool:
        assert proc.poll() is None, proc.communicate()
        return log.exists() and "SUBNET UP" in log.read_text(errors="replace")

    wait_for(subnet_up, 60, "OpenSM's SUBNET UP", interval=0.1)
    assert record.exists()
    sm_pid = json.loads(record.read_text())["sm_pid"]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"fabric {name!r} down:" in err and "MADs" in err
    assert not record.exists()
    assert not alive(sm_pid)
