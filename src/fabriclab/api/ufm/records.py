"""UFM's resource records (``resources/systems``, ``resources/ports``,
``resources/links``) built from the fabric's Layout and State: what never changes is
rendered to JSON text once per layout, what the state and the faults change (states,
LIDs, width and speed, severities) at each request, over NumPy columns, so that the
ports of a 260,000-port fabric come back in about a second.

Field names and value forms are UFM's: the port fields as ``rafalop/ufmctl``
``pkg/ufm/ports.go`` decodes them and NVIDIA's "Ports REST API" / "Mirroring REST API"
pages show them; the link record is the 14 keys of NVIDIA's "Links REST API" page
(v6.20); the system fields as a UFM answer quoted in ``IBM/CAST``'s CSM docs; the state
names as ufm_sdk_3.0's own ibdiagnet converter spells them
(``plugins/UFM_NDT_Plugin/ufm_plugin_ndt/topoparse/src/topoparse/parse_utils.py``,
commit 16faf03).  docs/ufm.md lists where fabriclab departs."""

from __future__ import annotations

import json
from functools import cached_property

import numpy as np

from ..view import LOGICAL, PHYSICAL, Layout, State
from .forms import (
    ACTIVE,
    CRITICAL,
    FAULT_SEVERITY,
    LINK_UP,
    MINOR,
    SEVERITIES,
    TARGET,
    UFM_ROLE,
    WARNING,
    ca_model,
    dname,
    switch_model,
)

# the fields of a system ``brief=true`` keeps
BRIEF = ("guid", "name", "system_name", "type", "role", "ip", "severity")


class Records:
    """The UFM records of one layout."""

    def __init__(self, layout: Layout):
        self.layout = layout
        L = layout
        n = L.nodes
        self.is_ca = ~L.node_switch
        self.system_name = [n["host"][i] or n["name"][i] for i in range(L.node_count)]
        # the port rows UFM lists: every numbered port (a switch's port 0 is not one)
        self.rows = np.nonzero(L.port_num > 0)[0]
        self.dnames = [
            dname(n["model"][node], n["kind"][node], n["hca"][node], num) if num else "0"
            for node, num in zip(L.ports["node"], L.ports["num"], strict=True)
        ]
        # systems: the nodes of one system GUID
        self.systems: dict[str, list[int]] = {}
        for i, g in enumerate(n["system_guid"]):
            self.systems.setdefault(g, []).append(i)

    # ---- look-ups ----

    @cached_property
    def row_by_target(self) -> dict[str, int]:
        """Port row by fabriclab's target form ``NAME[port]`` (``SWITCH[5]``,
        ``HOST/HCA[1]``)."""
        names, nodes, nums = (
            self.layout.nodes["name"],
            self.layout.ports["node"],
            self.layout.ports["num"],
        )
        return {
            f"{names[nd]}[{num}]": r
            for r, (nd, num) in enumerate(zip(nodes, nums, strict=True))
            if num
        }

    @cached_property
    def node_by_name(self) -> dict[str, list[int]]:
        """Nodes by switch name, HCA name (``HOST/HCA``) and tray (host) name."""
        out: dict[str, list[int]] = {}
        for i, (name, host) in enumerate(
            zip(self.layout.nodes["name"], self.layout.nodes["host"], strict=True)
        ):
            out.setdefault(name, []).append(i)
            if host and host != name:
                out.setdefault(host, []).append(i)
        return out

    def target_of(self, row: int) -> str:
        """fabriclab's target for the port at ``row`` (what the admin op ``fault`` takes)."""
        L = self.layout
        return f"{L.nodes['name'][L.ports['node'][row]]}[{L.ports['num'][row]}]"

    def target_rows(self, target: str) -> list[int]:
        """The port rows a fault's target names: a port and its peer; [] for a node."""
        row = self.row_by_target.get(target)
        if row is None:
            return []
        peer = int(self.layout.port_peer[row])
        return [row, peer] if peer >= 0 else [row]

    def target_nodes(self, target: str) -> list[int]:
        """The nodes a fault's target is on."""
        row = self.row_by_target.get(target)
        if row is not None:
            return [int(self.layout.port_node[row])]
        m = TARGET.match(target)
        return self.node_by_name.get(m.group("node") if m else target, [])

    def system_of_node(self, node: int) -> str:
        return self.layout.nodes["system_guid"][node]

    # ---- what the state and the faults make ----

    def severity(self, state: State, faults: list[dict]) -> np.ndarray:
        """Each port row's severity (an index into SEVERITIES): Critical for a cabled
        port whose link is not up, Warning for one up but not Active, Minor for a link retrained narrower or slower, the
        fault's for the ports under an errors, drop or flap fault, else Info."""
        L = self.layout
        sev = np.zeros(L.port_count, dtype=np.int8)
        cabled = L.port_peer >= 0
        sev[cabled & (state.col("state") != ACTIVE)] = WARNING  # up, not yet swept Active
        sev[cabled & (state.col("phys") != LINK_UP)] = CRITICAL
        degraded = (state.col("lanes") != 0) | (state.col("speed") != 0)
        sev[degraded] = np.maximum(sev[degraded], MINOR)
        for f in faults:
            level = FAULT_SEVERITY.get(f.get("kind", ""))
            if level is not None:
                for r in self.target_rows(str(f.get("target", ""))):
                    sev[r] = max(int(sev[r]), level)
        return sev

    def high_ber(self, faults: list[dict]) -> set[int]:
        """The port rows under an ``errors`` fault (a bit-error rate set on its link)."""
        return {
            r
            for f in faults
            if f.get("kind") == "errors"
            for r in self.target_rows(str(f.get("target", "")))
        }

    def widths(self, state: State) -> list[str]:
        out = list(self.layout.ports["width"])
        lanes = state.col("lanes")
        for r in np.nonzero(lanes)[0].tolist():
            out[r] = {1: "1x", 2: "2x", 4: "4x", 8: "8x", 12: "12x"}.get(int(lanes[r]), out[r])
        return out

    def speeds(self, state: State) -> list[str]:
        out = list(self.layout.ports["speed"])
        sp = state.col("speed")
        for r in np.nonzero(sp)[0].tolist():
            out[r] = self.layout.speeds[int(sp[r]) - 1]
        return out

    # ---- ports ----

    @cached_property
    def port_heads(self) -> dict[int, bytes]:
        """Each listed port row's fields that never change, as the JSON text of an
        object without its closing brace (and a trailing comma)."""
        L = self.layout
        n, p = L.nodes, L.ports
        heads: dict[int, bytes] = {}
        for r in self.rows.tolist():
            node = p["node"][r]
            num = p["num"][r]
            sw = n["kind"][node] == "switch"
            peer = p["peer"][r]
            pn = p["node"][peer] if peer >= 0 else -1
            sysname = self.system_name[node]
            speed, width = p["speed"][r], p["width"][r]
            rec = {
                "name": f"{n['guid'][node]}_{num}",
                "guid": p["guid"][r],
                "systemID": n["system_guid"][node],
                "system_name": sysname,
                "node_description": f"{sysname}:{self.dnames[r]}",
                "description": "Switch IB Port" if sw else "Computer IB Port",
                "number": num,
                "external_number": num,
                "dname": self.dnames[r],
                "tier": n["tier"][node],
                "path": f"default / {'Switch' if sw else 'Computer'}: {sysname} / NA / {num}",
                "mtu": 4096,
                "module": "N/A",
                "mirror": "disable",
                "enabled_speed": [speed] if speed else [],
                "supported_speed": [speed] if speed else [],
                "enabled_width": [width] if width else [],
                "supported_width": [width] if width else [],
                "peer": f"{n['guid'][pn]}_{p['num'][peer]}" if pn >= 0 else "N/A",
                "peer_guid": p["guid"][peer] if pn >= 0 else "N/A",
                "peer_node_guid": n["guid"][pn] if pn >= 0 else "N/A",
                "peer_node_name": self.system_name[pn] if pn >= 0 else "N/A",
                "peer_node_description": n["desc"][pn] if pn >= 0 else "N/A",
                "peer_port_dname": self.dnames[peer] if pn >= 0 else "N/A",
                "capabilities": ["enable", "reset"] if sw else [],
            }
            heads[r] = (json.dumps(rec, separators=(",", ":"))[:-1] + ",").encode()
        return heads

    def ports_json(self, rows: list[int], state: State, faults: list[dict]) -> bytes:
        """The port records of ``rows`` (a JSON array, UTF-8).  What the state makes of a port
        takes few forms (states, width, speed, severity): each form is rendered once
        and the records are joined from the fixed and the varying parts in one go."""
        if not rows:
            return b"[]"
        heads = self.port_heads
        idx = np.asarray(rows, dtype=np.int64)
        peer = self.layout.port_peer[idx]
        lid_all = state.col("lid")
        lid = lid_all[idx]
        plid = np.where(peer >= 0, lid_all[np.maximum(peer, 0)], 0)
        ph = np.minimum(state.col("phys")[idx], len(PHYSICAL) - 1).astype(np.int64)
        st = np.minimum(state.col("state")[idx], len(LOGICAL) - 1).astype(np.int64)
        sev = self.severity(state, faults)[idx].astype(np.int64)
        ber_rows = self.high_ber(faults)
        ber = np.isin(idx, list(ber_rows)) if ber_rows else np.zeros(len(idx), dtype=bool)
        width, speed = self.widths(state), self.speeds(state)
        wnames, wi = np.unique(
            np.asarray([width[r] for r in rows], dtype=object).astype(str), return_inverse=True
        )
        snames, si = np.unique(
            np.asarray([speed[r] for r in rows], dtype=object).astype(str), return_inverse=True
        )
        code = (
            (((ph * len(LOGICAL) + st) * len(SEVERITIES) + sev) * 2 + ber) * len(wnames) + wi
        ) * len(snames) + si
        forms: dict[int, bytes] = {}
        for key in np.unique(code).tolist():
            c, s_i = divmod(key, len(snames))
            c, w_i = divmod(c, len(wnames))
            c, b = divmod(c, 2)
            c, sv = divmod(c, len(SEVERITIES))
            p, lg = divmod(c, len(LOGICAL))
            forms[key] = (
                f'"physical_state":"{PHYSICAL[p]}","logical_state":"{LOGICAL[lg]}",'
                f'"active_speed":"{snames[s_i]}","active_width":"{wnames[w_i]}",'
                f'"severity":"{SEVERITIES[sv]}",'
                f'"high_ber_severity":"{"Warning" if b else "N/A"}"}},'
            ).encode()
        out = [b"["]
        put = out.append
        for r, a, b, c in zip(rows, lid.tolist(), plid.tolist(), code.tolist(), strict=True):
            put(heads[r])
            put(b'"lid":%d,"peer_lid":%d,' % (a, b))
            put(forms[c])
        out[-1] = out[-1][:-1]  # the last record's comma
        put(b"]")
        return b"".join(out)

    def port_rows(
        self,
        state: State,
        faults: list[dict],
        system: str | None = None,
        active: bool | None = None,
        high_ber_only: bool = False,
        show_disabled: bool = True,
    ) -> list[int]:
        """The listed port rows the filters keep."""
        rows = self.rows
        if system is not None:
            nodes = self.nodes_of_system(system)
            rows = (
                np.concatenate([np.arange(*self.layout.first_row[[i, i + 1]]) for i in nodes])
                if nodes
                else rows[:0]
            )
            rows = rows[self.layout.port_num[rows] > 0]
        if active is not None:
            is_active = state.col("state")[rows] == ACTIVE
            rows = rows[is_active if active else ~is_active]
        if not show_disabled:
            rows = rows[state.col("phys")[rows] != 3]
        out = rows.tolist()
        if high_ber_only:
            ber = self.high_ber(faults)
            out = [r for r in out if r in ber]
        return out

    def nodes_of_system(self, system: str) -> list[int]:
        """The nodes of a system given by its GUID (UFM's system ``name``) or name."""
        s = system.lower().removeprefix("0x")
        if s in self.systems:
            return self.systems[s]
        return [i for i, nm in enumerate(self.system_name) if nm == system]

    # ---- systems ----

    @cached_property
    def system_heads(self) -> dict[str, dict]:
        """Each system's fields that never change."""
        L = self.layout
        n = L.nodes
        out: dict[str, dict] = {}
        for g, nodes in self.systems.items():
            i = nodes[0]
            sw = n["kind"][i] == "switch"
            rows = [r for j in nodes for r in L.rows_of(j) if L.ports["num"][r]]
            speeds = sorted(
                {L.ports["speed"][r] for r in rows if L.ports["speed"][r]}, key=L.speeds.index
            )
            model = switch_model(n["desc"][i], n["model"][i]) if sw else ca_model(n["model"][i])
            out[g] = {
                "guid": g,
                "system_guid": g,
                "name": g,
                "system_name": self.system_name[i],
                "type": "switch" if sw else "host",
                "role": UFM_ROLE.get(n["role"][i], n["role"][i] or "endpoint"),
                "tier": n["tier"][i],
                "technology": speeds[-1] if speeds else "N/A",
                "model": model,
                "description": model if sw else n["desc"][i],
                "vendor": "Mellanox" if n["vendor_id"][i] == 0x2C9 else f"0x{n['vendor_id'][i]:x}",
                "fw_version": "N/A",
                "sw_version": "N/A",
                "psid": "N/A",
                "ip": "0.0.0.0",
                "state": "active",
                "sm_mode": "noSM",
                "server_operation_mode": "Switch" if sw else "Compute",
                "capabilities": [],
                "groups": [],
                "temperature": "N/A",
                "modules": [],
                "has_ufm_agent": False,
                "_rows": rows,
                "_nodes": nodes,
            }
        return out

    def systems_list(
        self,
        state: State,
        faults: list[dict],
        alarms: dict[str, int],
        keys: list[str] | None = None,
        ports: bool = True,
        brief: bool = False,
    ) -> list[dict]:
        """Every system (``keys``: only those), with its severity (its ports' worst),
        its alarm count and (``ports``) its port names; ``brief``: only BRIEF's keys."""
        L = self.layout
        # each node's worst port (a node's port rows are contiguous)
        node_sev = np.maximum.reduceat(self.severity(state, faults), L.first_row[:-1]).tolist()
        names = L.port_name
        out = []
        for g in keys if keys is not None else self.system_heads:
            head = self.system_heads[g]
            if brief:
                rec = {k: head[k] for k in BRIEF if k in head}
            else:
                rec = {k: v for k, v in head.items() if not k.startswith("_")}
            rec["severity"] = SEVERITIES[max(node_sev[i] for i in head["_nodes"])]
            if not brief:
                rec["total_alarms"] = alarms.get(g, 0)
            if ports:
                rec["ports"] = [names(r) for r in head["_rows"]]
            out.append(rec)
        return out

    # ---- links ----

    @cached_property
    def link_heads(self) -> list[tuple[int, int, str, str]]:
        """Each cable once: (row, peer row, JSON before width, JSON after severity)."""
        L = self.layout
        n, p = L.nodes, L.ports
        out = []
        for a, b in L.links.tolist():
            na, nb = p["node"][a], p["node"][b]
            sa, sb = f"{n['guid'][na]}_{p['num'][a]}", f"{n['guid'][nb]}_{p['num'][b]}"
            head = {
                "source_guid": n["guid"][na],
                "source_port": str(p["num"][a]),
                "destination_guid": n["guid"][nb],
                "destination_port": str(p["num"][b]),
                "source_port_dname": self.dnames[a],
                "source_port_name": sa,
                "destination_port_dname": self.dnames[b],
                "destination_port_name": sb,
            }
            tail = {
                "source_port_node_description": f"{self.system_name[na]}:{self.dnames[a]}",
                "destination_port_node_description": f"{self.system_name[nb]}:{self.dnames[b]}",
                "name": f"{sa}:{sb}",
                "capabilities": ["collect_system_dump"],
            }
            out.append(
                (
                    a,
                    b,
                    json.dumps(head, separators=(",", ":"))[:-1] + ",",
                    "," + json.dumps(tail, separators=(",", ":"))[1:],
                )
            )
        return out

    def link_indexes(self, system: str | None = None) -> list[int]:
        """The links (indexes into link_heads) the ``system`` filter keeps."""
        heads = self.link_heads
        if system is None:
            return list(range(len(heads)))
        nodes = set(self.nodes_of_system(system))
        pn = self.layout.ports["node"]
        return [i for i, (a, b, _, _) in enumerate(heads) if pn[a] in nodes or pn[b] in nodes]

    def links_json(self, idx: list[int], state: State, faults: list[dict]) -> str:
        """The 14-key link records of links ``idx`` (a JSON array)."""
        sev = self.severity(state, faults).tolist()
        width = self.widths(state)
        heads = self.link_heads
        out = ["["]
        put = out.append
        for i in idx:
            a, b, head, tail = heads[i]
            put(head)
            put(f'"width":"{width[a]}","severity":"{SEVERITIES[max(sev[a], sev[b])]}"')
            put(tail)
            put(",")
        if idx:
            out.pop()
        put("]")
        return "".join(out)
