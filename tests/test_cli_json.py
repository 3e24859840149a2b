"""Every listing's --json: one JSON document, in the shape docs/commands.md shows, holding
what the library returns (the running fabric's admin answers, the model's summary);
events --json stays JSON lines, as the log keeps them."""

from __future__ import annotations

import json
from pathlib import Path

from fabric_server import fabric_up
from helpers import fl

from fabriclab.model.build import build
from fabriclab.model.summary import summarize
from fabriclab.sim.live import events as event_log
from fabriclab.spec.load import load_spec, preset_names

SCENARIO = """name: two-steps
steps:
  - at: 10s
    do: down LAB-IBLEAF-01[9]
  - at: 20s
    do: up LAB-IBLEAF-01[9]
"""


def _json(*args: str, env: dict | None = None):
    r = fl(*args, env=env)
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)


def test_presets_validate_and_inspect():
    listed = _json("presets", "--json")
    assert [p["name"] for p in listed] == list(preset_names())
    for p in listed:
        s = summarize(build(load_spec(p["name"])))
        assert p == {
            "name": p["name"],
            "description": s.description,
            "trays": s.trays,
            "gpus": s.gpus,
            "hcas": s.hcas,
            "switches": s.switches,
            "tiers": len(s.tiers),
        }
    assert _json("validate", "lab", "--json") == {
        "name": "lab",
        "trays": 2,
        "cas": 8,
        "switches": 2,
        "links": 12,
    }
    # every NVLink domain, where the table shows the first 20
    big = _json("inspect", "gb200-su", "--trays", "1440", "--json")
    assert big == summarize(build(load_spec("gb200-su", trays=1440))).to_json()
    assert len(big["domains"]) == 80 and big["domains"][0]["trays"] == 18
    assert [(t["tier"], t["role"], t["oversubscription"]) for t in big["tiers"]][-1][2] is None
    lab = _json("inspect", "lab", "--json")
    assert lab["tiers"][0] == {
        "tier": 1,
        "role": "leaf",
        "switches": 1,
        "links_down": 8,
        "links_up": 4,
        "oversubscription": 2.0,
    }
    assert lab["link_rates"] == {"4xNDR": 12} and lab["domains"][0]["name"] == "nvl8"


def test_the_running_fabric_listings(tmp_path):
    with fabric_up("lab", tmp_path, extra=["--virtual-clock"]) as f:
        [up] = [s for s in _json("status", "--json", env=f.env) if s["name"] == f.name]
        assert up == {
            "name": f.name,
            "pid": f.instance().pid,
            "spec": "lab",
            "reach": f"IBSIM_SOCKNAME={f.name}",
            "opensm": "-",
            "api": None,
        }
        f.ok("fault", "--name", f.name, "degrade", "LAB-IBLEAF-01[6]", "--speed", "HDR")
        [fault] = _json("fault", "--name", f.name, "list", "--json", env=f.env)
        assert fault == {
            "id": 1,
            "kind": "degrade",
            "target": "LAB-IBLEAF-01[6]",
            "options": {"speed": "HDR"},
            "since": 0.0,
            "progress": {},
        }
        (tmp_path / "s.yaml").write_text(SCENARIO)
        f.ok("scenario", "--name", f.name, "run", str(tmp_path / "s.yaml"))
        f.ok("clock", "--name", f.name, "advance", "15")
        assert _json("clock", "--name", f.name, "show", "--json", env=f.env) == {
            "now": 15.0,
            "virtual": True,
        }
        [running] = _json("scenario", "--name", f.name, "list", "--json", env=f.env)
        assert (running["name"], running["start"], running["done"]) == ("two-steps", 0.0, 1)
        assert [s["at"] for s in running["steps"]] == [10.0, 20.0]
        listed = f.ok("scenario", "--name", f.name, "list")
        assert listed.splitlines()[2].split() == ["two-steps", "0", "1/2"], listed
        f.ok("clock", "--name", f.name, "advance", "10")
        assert _json("scenario", "--name", f.name, "list", "--json", env=f.env) == []
        # events --json: JSON lines, each an event as the log keeps it
        lines = f.ok("events", "--name", f.name, "--json").splitlines()
        path = event_log.events_path(Path(f.env["FABRICLAB_STATE_DIR"]), f.name)
        kept = [json.loads(line) for line in path.read_text().splitlines()]
        assert [json.loads(line) for line in lines] == kept and len(kept) >= 3
        # traffic list --json: the summary of the flows picked, the first 20, how many more
        f.ok("traffic", "--name", f.name, "send", "sched-worker1", "sched-worker2", "--bytes", "1")
        doc = _json("traffic", "--name", f.name, "list", "--json", env=f.env)
        assert doc == {
            "summary": {
                "flows": 1,
                "states": {"running": 0, "done": 0, "stopped": 0, "retrying": 1, "failed": 0},
                "sent": 1,
                "delivered": 0,
                "rate": 0.0,
            },
            "flows": [
                {
                    "id": 1,
                    "from": "sched-worker1/mlx5_0",
                    "to": "sched-worker2/mlx5_0",
                    "rate": 0.0,
                    "sent": 1,
                    "delivered": 0,
                    "size": 1,
                    "limit": None,
                    "state": "retrying",
                    "dropped": doc["flows"][0]["dropped"],
                    "reason": "link LAB-IBLEAF-01[1] is INIT, not ACTIVE",  # no SM here
                    "timeout": 20,
                    "retry_count": 7,
                }
            ],
            "more": 0,
        }
