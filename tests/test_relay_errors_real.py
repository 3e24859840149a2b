"""A fabric the real OpenSM has just brought up is clean: the real ibqueryerrors finds no
error on any node.  OpenSM's LID manager resets the links of CA ports whose MTU or VLs
it changes (osm_lid_mgr.c: PortState Down), each leaf sends its SM trap 128 before the
SM has written its forwarding tables, and a Notice the leaf cannot route is dropped at
its source: it was received on no port, so it is no PortRcvSwitchRelayErrors (a health
check's baseline starts green).  A packet that comes in over a link and has no
forwarding entry still counts where it came in (test_router, test_traffic)."""

from __future__ import annotations

import pytest
from fabric_server import fabric_up


@pytest.mark.parametrize(
    ("spec", "tray", "nodes"), [("lab", "sched-worker1", 10), ("gb200-su", "gb-r01-t01", 617)]
)
def test_a_fresh_fabric_has_no_errors(real_tools, tmp_path, spec, tray, nodes):
    """The issue's reproducer: 'up SPEC --sm', then the real ibqueryerrors on a tray
    (through 'exec': the tray's own HCAs)."""
    with fabric_up(spec, tmp_path, sm=True) as f:
        r = f.fabriclab("exec", "--name", f.name, tray, "--", "ibqueryerrors")
        tail = r.stdout[-3000:]
        assert r.returncode == 0, (tail, r.stderr)
        assert f"## Summary: {nodes} nodes checked, 0 bad nodes found" in r.stdout, tail
        assert "PortRcvSwitchRelayErrors" not in r.stdout, tail
