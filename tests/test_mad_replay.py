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

from fabriclab.ib import simwire
from fabriclab.sim.run import admin, replay
from fabriclab.sim.wire import record

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
