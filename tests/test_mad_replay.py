"""Recorded MAD streams of real tool runs (tests/fixtures/madrec: ibnetdiscover; OpenSM's
first sweep and a light sweep, perfquery, a link down in the middle, ibnetdiscover)
replayed through each MAD core (``FABRICLAB_MAD_CORE``): the answers, the traps, every
port's counters and states, and the server's counts are the same byte for byte, and the
answers are those the tools got when the stream was recorded.  The recorder itself is
checked on a fresh run of the real ibnetdiscover."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from conftest import FIXTURES
from fabric_server import fabric_up
from helpers import served
from simclient import SimClient, dr_smp

from fabriclab.ib import simwire
from fabriclab.model.build import build
from fabriclab.sim.run import admin, replay
from fabriclab.sim.wire import record
from fabriclab.spec.load import load_spec

STREAMS = sorted((FIXTURES / "madrec").glob("*.madrec.gz"))
CORES = ("python", "native")


def _admin(f):
    path = admin.admin_path(Path(f.env["FABRICLAB_STATE_DIR"]), f.name)
    return lambda req: admin.call(path, req, timeout=60)


def _replayed(stream: Path, core: str, tmp: Path, monkeypatch) -> dict:
    """The stream replayed on a fresh lab fabric served through ``core``: what came
    back, the state file of every port (counters, LIDs, states) and the counts."""
    monkeypatch.setenv("FABRICLAB_MAD_CORE", core)
    records = list(record.read(stream))
    with fabric_up("lab", tmp / core) as f:
        call = _admin(f)
        out = replay.Replay(f.name, admin=call).run(records)
        state = call({"op": "watch", "part": "state"})
        ports = Path(state["path"]).read_bytes()
        stats = call({"op": "stats"})
        # what each admin operation cost the loop is timing, not an outcome: its counts stay
        stats["requests"] = [(r["op"], r["count"]) for r in stats["requests"]]
    return {"out": out, "ports": ports, "stats": stats, "records": records}


@pytest.mark.parametrize("stream", STREAMS, ids=lambda p: p.name.split(".")[0])
def test_a_recorded_stream_replays_alike_through_both_cores(stream, tmp_path, monkeypatch):
    runs = {core: _replayed(stream, core, tmp_path, monkeypatch) for core in CORES}
    py, native = runs["python"], runs["native"]
    # the harness: what the reference path answers is what the tools got when recorded
    assert py["out"].missing == 0
    want = replay.expected(py["records"])
    got = [[x for x in step if x[0] != record.ADMIN] for step in py["out"].steps]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"step {i}: the replay's answers differ from the recording's"
    # the two cores: answers, traps, admin results, every port, the counts
    assert native["out"].missing == 0
    for i, (a, b) in enumerate(zip(py["out"].steps, native["out"].steps, strict=True)):
        assert a == b, f"step {i}: the cores answer differently"
    assert py["ports"] == native["ports"]
    assert py["stats"] == native["stats"]
    assert py["stats"]["mads"] == py["out"].mads > 0


def test_the_session_stream_holds_a_fault_and_its_trap():
    """The session fixture is what it says: OpenSM attached as the SM, the fault between
    tool runs, and the switch's trap 128 sent to OpenSM after it."""
    records = list(record.read(FIXTURES / "madrec" / "lab-session.madrec.gz"))
    kinds = [r.kind for r in records]
    fault = kinds.index(record.ADMIN)
    assert records[fault].json() == {"op": "fault", "kind": "down", "target": "LAB-IBLEAF-01[5]"}
    after = next(r for r in records[fault + 1 :] if r.kind == record.MAD_OUT)
    mad = after.data[simwire.REQUEST_MAD :]
    assert mad[1] == 0x01 and mad[3] == 0x05  # a LID-routed SMP, method Trap
    assert int.from_bytes(mad[64 + 4 : 64 + 6], "big") == 128  # Notice's TrapNumber
    attached = [r.json() for r in records if r.kind == record.ATTACH]
    assert len(attached) >= 7 and all(a["guid"].startswith("0x") for a in attached)


def test_the_recorder_records_a_real_ibnetdiscover_that_replays_alike(
    real_tools, tmp_path, monkeypatch
):
    path = tmp_path / "disc.madrec.gz"
    monkeypatch.setenv(record.ENV, str(path))
    with fabric_up("lab", tmp_path / "rec") as f:
        topo = f.run("sched-worker1", "ibnetdiscover").stdout
    assert "LAB-IBSPINE-01" in topo
    monkeypatch.delenv(record.ENV)
    records = list(record.read(path))
    ins = [r for r in records if r.kind == record.MAD_IN]
    outs = [r for r in records if r.kind == record.MAD_OUT]
    assert len(ins) == len(outs) > 100
    (att,) = [r.json() for r in records if r.kind == record.ATTACH]
    assert att["nodeid"].startswith("sched-worker1") and att["issm"] is False
    with fabric_up("lab", tmp_path / "again") as f:
        out = replay.Replay(f.name, admin=_admin(f)).run(records)
    assert out.missing == 0
    assert [b for _c, b in out.received()] == [r.data for r in outs]


def test_the_recorder_writes_what_the_server_took_and_sent_in_order(tmp_path):
    """In process: a client attaches, asks a NodeInfo one hop away, sends a datagram of
    the wrong size, and leaves; the recording holds each in the server's order, the
    answer as the client got it; replayed through a fresh server, the same answers."""
    cluster = build(load_spec("lab"))
    path = tmp_path / "x.madrec.gz"
    with served(cluster) as srv:
        rec = record.Recorder(srv, path)
        with SimClient(srv.name, "sched-worker1") as c:
            c.send_raw(simwire.request(0xFFFF, 0, dr_smp(0x11, [1])))
            answer = c.recv_raw()
            c.send_raw(b"short")
            c.request(dr_smp(0x15, [1, 1], tid=2))
        rec.close()
    records = list(record.read(path))
    kinds = [record.KIND_NAMES[r.kind] for r in records]
    assert kinds == [
        "ctl-in", "ctl-out", "attach",  # the CONNECT
        "mad-in", "mad-out", "mad-in",  # the NodeInfo and its answer; the short datagram
        "mad-in", "mad-out",  # the PortInfo, two hops away
        "ctl-in", "detach", "ctl-out",  # the DISCONNECT
    ]  # fmt: skip
    assert records[4].data == answer and records[5].data == b"short"
    att = records[2].json()
    assert att["nodeid"] == "sched-worker1" and att["port"] == 1 and att["issm"] is False
    guid = cluster.locate("sched-worker1", switches=True)[0].node.guid
    assert att["guid"] == f"0x{guid:016x}"
    with served(cluster) as srv:
        out = replay.Replay(srv.name, wait=5).run(records)
    assert out.missing == 0 and out.mads == 3
    assert out.steps == [
        [(record.CTL_OUT, 0, records[1].data)],
        [(record.MAD_OUT, 0, records[4].data)],
        [],
        [(record.MAD_OUT, 0, records[7].data)],
        [(record.CTL_OUT, 0, records[10].data)],
    ]
    assert replay.expected(records) == out.steps


def test_a_file_that_is_not_a_recording_is_refused(tmp_path):
    p = tmp_path / "x.gz"
    with gzip.open(p, "wb") as f:
        f.write(b"not a recording\n")
    with pytest.raises(ValueError, match="not a MAD stream recording"):
        list(record.read(p))
    with gzip.open(p, "wb") as f:
        f.write(record.MAGIC + record.HEADER.pack(record.MAD_IN, 0, 288) + b"short")
    with pytest.raises(ValueError, match="cut short"):
        list(record.read(p))
