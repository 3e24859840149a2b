"""The admin socket's requests checked by one model before anything runs: a line nested
too deep, a field of the wrong type, a field nobody reads, an option no fault takes,
each one ``request`` error line (never ``internal``), and nothing changed."""

from __future__ import annotations

import functools
import json

import pytest
from helpers import served
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabriclab.model.build import build
from fabriclab.sim.live import admin_requests
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.sim.run.admin import AdminServer
from fabriclab.spec.load import load_spec

LEAF = "LAB-IBLEAF-01"


@pytest.fixture(scope="module")
def server():
    """An admin server's answering end on a live lab fabric (no socket: lines in,
    answers out)."""
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        clock = VirtualClock()
        live = LiveFabric(srv, cluster, clock, traffic=TrafficEngine(srv.sim, clock))
        yield AdminServer(None, functools.partial(admin_requests.answer, live), None), live


def ask(server, req) -> dict:
    line = req if isinstance(req, bytes) else json.dumps(req).encode()
    return server[0]._answer(line)


def test_a_line_nested_974_deep_is_one_error_and_the_next_is_answered(server):
    line = b"[" * 974 + b"]" * 974  # 1,948 bytes and its newline: 1,949
    r = ask(server, line)
    assert r == {"ok": False, "where": "request", "what": "nests deeper than 32 levels"}
    r = ask(server, b'{"op": "x", "a": ' + b"{" * 40 + b"}" * 40 + b"}")
    assert r["where"] == "request" and "deeper" in r["what"]
    # brackets inside a string are text, not nesting
    r = ask(server, b'{"s": "' + b"[" * 5000 + b'", "op": "clock"}')
    assert r == {"ok": False, "where": "request", "what": "s: unknown field"}
    assert ask(server, {"op": "clock"}) == {"ok": True, "result": {"now": 0.0, "virtual": True}}


WRONG_TYPES = [
    ({"op": "traffic", "verb": "send", "args": 5}, "args: want a list"),
    ({"op": "traffic", "verb": "send", "args": ["a", 1]}, "args[1]: want a string"),
    ({"op": "traffic", "verb": "list", "args": [], "options": "x"}, "options: want an object"),
    ({"op": "traffic", "verb": 5, "args": []}, "verb: want a string"),
    (
        {"op": "traffic", "verb": "send", "args": ["a", "b"], "options": {"bytes": [1]}},
        "options.bytes: want an integer or a string",
    ),
    (
        {"op": "fault", "kind": "down", "target": f"{LEAF}[5]", "options": {"kind": "x"}},
        "options.kind: unknown field",
    ),
    (
        {"op": "fault", "kind": "flap", "target": f"{LEAF}[5]", "options": {"count": "1e9"}},
        "options.count: want an integer",
    ),
    (
        {"op": "fault", "kind": "errors", "target": f"{LEAF}[5]", "options": {"ber": "x"}},
        "options.ber: want a number",
    ),
    (
        {"op": "fault", "kind": "drop", "target": LEAF, "options": {"seed": "x"}},
        "options.seed: want an integer",
    ),
    (
        {"op": "fault", "kind": "drop", "target": LEAF, "options": {"rate": [1]}},
        "options.rate: want a number",
    ),
    (
        {"op": "fault", "kind": "down", "target": f"{LEAF}[5]", "options": []},
        "options: want an object",
    ),
    ({"op": "nvidia-smi", "tray": "sched-worker1", "args": 5}, "args: want a list"),
    ({"op": "clear", "id": True}, "id: want an integer"),
    ({"op": "clear", "id": "1"}, "id: want an integer"),
    ({"op": "tray", "host": 5}, "host: want a string"),
    ({"op": "tray"}, "host: missing"),
    ({"op": "advance", "seconds": [1]}, "seconds: want a number or a string"),
    ({"op": "scenario", "text": 5}, "text: want a string"),
    ({"op": "clock", "now": 5}, "now: unknown field"),
    ({"op": 5}, "unknown operation 5"),
    ({"nope": 1}, "op: missing"),
    ({"op": "clock", "now": float("inf")}, "not JSON: Infinity is not a JSON number"),
]


@pytest.mark.parametrize(("req", "what"), WRONG_TYPES, ids=[w for _, w in WRONG_TYPES])
def test_a_field_of_the_wrong_type_is_one_request_error(server, req, what):
    assert ask(server, req) == {"ok": False, "where": "request", "what": what}


def test_clear_id_true_clears_nothing(server):
    live = server[1]
    f = ask(server, {"op": "fault", "kind": "down", "target": f"{LEAF}[5]"})
    assert f["ok"], f
    fid = f["result"]["id"]
    try:
        r = ask(server, {"op": "clear", "id": True})
        assert r == {"ok": False, "where": "request", "what": "id: want an integer"}
        assert [x["id"] for x in live.faults()] == [fid]
    finally:
        live.clear(None)


@pytest.mark.parametrize(
    ("kind", "target", "options", "where", "what"),
    [
        (
            "down",
            f"{LEAF}[5]",
            {"period": 2},
            "options",
            "down takes no option 'period' (options: none)",
        ),
        (
            "flap",
            f"{LEAF}[5]",
            {"ber": 1e-9},
            "options",
            "flap takes no option 'ber' (options: count, period)",
        ),
        (
            "nvlink",
            "sched-worker1",
            {"rate": 5},
            "options",
            "nvlink takes no option 'rate' (options: gpus)",
        ),
    ],
)
def test_an_option_the_fault_does_not_take_is_refused_naming_it(
    server, kind, target, options, where, what
):
    r = ask(server, {"op": "fault", "kind": kind, "target": target, "options": options})
    assert r == {"ok": False, "where": where, "what": what}
    assert server[1].faults() == []


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_ops = st.sampled_from([*sorted(admin_requests.OPS), "x"])
_keys = st.sampled_from(
    [
        "kind",
        "target",
        "options",
        "verb",
        "args",
        "id",
        "text",
        "source",
        "seconds",
        "tray",
        "host",
        "name",
        "from",
        "period",
        "count",
        "bytes",
        "rate",
    ]
)
_requests = st.builds(
    lambda op, fields: {"op": op, **fields}, _ops, st.dictionaries(_keys, _json, max_size=4)
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(req=_requests | _json)
def test_random_documents_never_answer_internal(server, req):
    r = ask(server, req)
    assert r.get("where") != "internal", (req, r)
    server[1].clear(None)
    server[1].traffic_request("stop", [], {})


class _Loop:
    """The bits of the transport an admin server uses, as a record."""

    def __init__(self):
        self.watched: dict[int, object] = {}
        self.wants: dict[int, tuple[bool, bool]] = {}
        self.on_tick: list = []

    def watch(self, fd, ready):
        self.watched[fd] = ready

    def unwatch(self, fd):
        self.watched.pop(fd, None)

    def want(self, fd, readable=True, writable=False):
        self.wants[fd] = (readable, writable)


def _connected(handle, monkeypatch, out_max: int):
    """An admin server (a fake loop) with one connection of a socket pair: the server's
    state, the client's end."""
    import socket

    from fabriclab.sim.run import admin

    monkeypatch.setattr(admin, "OUT_MAX", out_max)
    loop = _Loop()
    srv = admin.AdminServer(None, handle, loop)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.setblocking(False)
    c = admin._Conn(theirs, 0)
    srv.conns[theirs.fileno()] = c
    loop.watch(theirs.fileno(), lambda: srv._serve(c))
    return srv, loop, c, mine


def test_a_result_that_is_not_json_costs_one_answer(monkeypatch):
    answers = iter([object(), {"fine": 1}])
    srv, _loop, c, mine = _connected(lambda req: next(answers), monkeypatch, 1 << 20)
    mine.sendall(b'{"op": "a"}\n{"op": "b"}\n')
    srv._serve(c)
    got = [json.loads(x) for x in mine.recv(65536).splitlines()]
    assert got[0]["where"] == "internal" and got[1] == {"ok": True, "result": {"fine": 1}}
    assert srv.conns


def test_a_client_that_does_not_read_is_closed_past_the_bound(monkeypatch):
    srv, loop, c, mine = _connected(lambda req: "x" * 50_000, monkeypatch, 100_000)
    for _ in range(200):  # the socket's buffer fills, then the server's, then it closes
        if not srv.conns:
            break
        mine.sendall(b'{"op": "a"}\n')
        srv._serve(c)
    assert not srv.conns and not loop.watched
    assert len(c.out) <= 100_000 + 50_100


def test_answers_untaken_for_stall_max_close_the_client(monkeypatch):
    from fabriclab.sim.run import admin

    srv, loop, c, mine = _connected(lambda req: "x" * 50_000, monkeypatch, 1 << 30)
    while not c.out:
        mine.sendall(b'{"op": "a"}\n')
        srv._serve(c)
    assert loop.wants[c.sock.fileno()] == (True, True)  # watched for writing meanwhile
    srv._sweep()
    assert srv.conns  # not yet
    c.moved -= admin.STALL_MAX + 1
    srv._sweep()
    assert not srv.conns


def test_stats_say_what_each_operations_requests_cost_the_loop(server):
    """``stats``' ``requests``: each operation's count, total and recent median and
    maximum seconds (how bench/storm.py reads what a fault request costs)."""

    def fault_cost() -> dict:
        got = ask(server, {"op": "stats"})["result"]["requests"]
        return next((c for c in got if c["op"] == "fault"), {"count": 0})

    before = fault_cost()
    for kind in ("down", "up"):
        r = ask(server, {"op": "fault", "kind": kind, "target": f"{LEAF}[3]", "options": {}})
        assert r["ok"], r
    ask(server, {"op": "fault", "kind": "nope", "target": "x", "options": {}})  # refused
    cost = fault_cost()
    assert cost["count"] == before["count"] + 3
    assert 0 < cost["median"] <= cost["max"] < 5 and cost["seconds"] >= cost["max"]
