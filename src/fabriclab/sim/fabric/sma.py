"""The Subnet Management Agent of every node (IBA Vol. 1, 14.2.5): Get and Set of the
SMA attributes, with the specification's rules for what a Set may change.

A handler gets the port the SMP arrived on, the method, the attribute modifier and the
64 data bytes; it returns the MAD status and the attribute to send back.  On an invalid
Set the attribute is left as it was and its current value is returned with status
"invalid field", as the specification asks.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from ...ib.devices import mlnx_ext_port_info_supported
from ...ib.enums import PhysState, PortState
from ...ib.mad.consts import (
    STATUS_INVALID_FIELD,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    STATUS_OK,
    Attr,
    Method,
)
from ...ib.mad.layouts import GUID_INFO, GUIDS_PER_BLOCK, MLNX_EXT_PORT_INFO, PORT_INFO, SWITCH_INFO
from . import portinfo
from .portinfo import written
from .state import DEFAULT_SL2VL, SimPort

Reply = tuple[int, bytes]
Handler = Callable[[SimPort, int, int, bytes], Reply]  # (port, method, modifier, data)
_ZERO64 = bytes(64)
_GUID_FIELDS = tuple(name for name, _, _ in GUID_INFO.fields)  # GUID0 .. GUID7


class Sma:
    """Dispatch of SMPs to attribute handlers.  ``events`` receives what the rest of
    the fabric must react to (a link taken down by a Set, say)."""

    def __init__(self, events=None):
        self.events = events
        table = {
            Attr.NODE_DESC: node_desc,
            Attr.NODE_INFO: node_info,
            Attr.SWITCH_INFO: switch_info,
            Attr.GUID_INFO: guid_info,
            Attr.PORT_INFO: port_info,
            Attr.PKEY_TABLE: pkey_table,
            Attr.SL_TO_VL: sl_to_vl,
            Attr.VL_ARB: vl_arbitration,
            Attr.LINEAR_FDB: linear_fdb,
            Attr.MCAST_FDB: mcast_fdb,
            Attr.MLNX_EXT_PORT_INFO: mlnx_ext_port_info,
        }
        # attribute id -> handler(port, method, modifier, data), for Get and Set only
        self.handlers: dict[int, Handler] = {int(a): partial(fn, self) for a, fn in table.items()}


def _read_only(method: int, value: bytes) -> Reply:
    return (STATUS_OK if method == Method.GET else STATUS_METHOD_ATTR_UNSUPPORTED), value


def node_desc(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """NodeDescription (14.2.5.2, read-only)."""
    return _read_only(method, port.node.node_desc)


def node_info(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """NodeInfo (14.2.5.3, read-only), as read through ``port``."""
    return _read_only(method, port.node.node_info(port.num))


def _target_port(port: SimPort, num: int) -> SimPort | None:
    """The port an attribute modifier names: any port of a switch; on a CA, port 0 or
    its own number mean the port the SMP came in on (14.2.5.6)."""
    node = port.node
    if node.is_switch:
        return node.port(num)
    if num == 0 or num == port.num:
        return port
    return node.port(num)


def port_info(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """PortInfo (14.2.5.6) of the port the modifier names; LocalPort is ``port``'s."""
    target = _target_port(port, mod & 0xFF)
    if target is None:
        return STATUS_INVALID_FIELD, _ZERO64
    status = STATUS_OK
    if method == Method.SET:
        if not port.node.is_switch and target is not port:
            status = STATUS_INVALID_FIELD  # a CA's SMA sets only the port it is reached on
        else:
            status = _set_port_info(sma, target, data)
    return status, PORT_INFO.splice(target.port_info(), "LocalPort", port.num)


_PORT_STATE_SET = frozenset(
    (int(PortState.NOP), int(PortState.DOWN), int(PortState.ARMED), int(PortState.ACTIVE))
)


_DOWN, _INIT, _ARMED, _ACTIVE = (
    int(PortState.DOWN),
    int(PortState.INIT),
    int(PortState.ARMED),
    int(PortState.ACTIVE),
)
_POLLING, _DISABLED = int(PhysState.POLLING), int(PhysState.DISABLED)


def _set_port_info(sma: Sma, p: SimPort, data: bytes) -> int:
    """Apply a PortInfo Set to ``p``; all of it, or (invalid field) none of it."""
    caps = p.node.caps
    values = portinfo.read_settable(data)
    state, phys = written(values, "LinkState"), written(values, "PhysLinkState")
    # --- validate
    if state not in _PORT_STATE_SET or phys not in (0, _POLLING, _DISABLED):
        return STATUS_INVALID_FIELD
    if p.num != 0 and (state == _ARMED or state == _ACTIVE):
        need = _INIT if state == _ARMED else _ARMED
        peer = p.peer
        if not p.up or p.state not in (need, state) or peer is None or peer.state < need:
            return STATUS_INVALID_FIELD
    if written(values, "NeighborMTU") > caps.mtu_cap or written(values, "OperVLs") > caps.vl_cap:
        return STATUS_INVALID_FIELD
    # --- apply, each component by its rule (0 in an "enabled" field means "no change")
    portinfo.apply(p, values)
    p.changed()
    if p.num != 0:
        events = sma.events
        if phys == _DISABLED:
            if events:
                events.disable_port(p)
        elif phys == _POLLING and p.phys == _DISABLED:
            if events:
                events.enable_port(p)
        elif state == _DOWN:
            if events:
                events.retrain_port(p)
        elif (state == _ARMED or state == _ACTIVE) and p.state != state:
            p.state = PortState(state)
    return STATUS_OK


def switch_info(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """SwitchInfo (14.2.5.4): LinearFDBTop below LinearFDBCap, StateChange write-1-to-clear."""
    sw = port.node.sw
    if sw is None:
        return STATUS_METHOD_ATTR_UNSUPPORTED, _ZERO64
    if method == Method.SET:
        v = SWITCH_INFO.unpack(data)
        if v["LinearFdbTop"] >= sw.caps.linear_fdb_cap:
            return STATUS_INVALID_FIELD, sw.switch_info()
        if sw.lft_top != v["LinearFdbTop"]:
            sw.lft_top = v["LinearFdbTop"]
            sw.gen.bump(switch=sw)  # LIDs above the top are no longer (or now) forwarded
        sw.mft_top = v["MulticastFDBTop"]
        sw.def_port = v["DefPort"]
        sw.def_mcast_prim = v["DefMcastPrimPort"]
        sw.def_mcast_not_prim = v["DefMcastNotPrimPort"]
        sw.lifetime = v["LifeTime"]
        if v["StateChange"]:  # write 1 to clear
            sw.state_change = 0
    return STATUS_OK, sw.switch_info()


def linear_fdb(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """LinearForwardingTable (14.2.5.10): block ``mod`` of 64 LIDs' output ports."""
    sw = port.node.sw
    if sw is None:
        return STATUS_METHOD_ATTR_UNSUPPORTED, _ZERO64
    if mod >= sw.caps.linear_fdb_cap // 64:
        return STATUS_INVALID_FIELD, _ZERO64
    if method == Method.SET:
        sw.write_lft_block(mod, data)
    return STATUS_OK, sw.lft_block(mod)


def mcast_fdb(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """14.2.5.11: modifier bits 31-28 pick 16 ports (position), bits 8-0 a block of 32
    multicast LIDs."""
    node = port.node
    sw = node.sw
    if sw is None:
        return STATUS_METHOD_ATTR_UNSUPPORTED, _ZERO64
    position, block = mod >> 28, mod & 0x1FF
    if position > node.fabric_node.nports // 16 or block >= max(1, sw.caps.mcast_fdb_cap // 32):
        return STATUS_INVALID_FIELD, _ZERO64
    if method == Method.SET:
        sw.mft[(block, position)] = bytes(data[:64])
    return STATUS_OK, sw.mft.get((block, position), _ZERO64)


def pkey_table(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """14.2.5.7: 32 P_Keys per block; a switch's modifier also names the port."""
    node = port.node
    target = node.port(mod >> 16) if node.is_switch else port
    block = mod & 0xFFFF
    if target is None or block * 64 >= len(target.pkeys):
        return STATUS_INVALID_FIELD, _ZERO64
    table = target.pkeys
    if method == Method.SET:
        n = min(64, len(table) - block * 64)
        table[block * 64 : block * 64 + n] = data[:n]
        target.changed()  # who may talk to whom changed: traffic is checked anew
    return STATUS_OK, bytes(table[block * 64 : block * 64 + 64]).ljust(64, b"\0")


def sl_to_vl(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """14.2.5.8: a switch's modifier names input (bits 15-8) and output (7-0) ports."""
    node = port.node
    if node.is_switch:
        inp, outp = (mod >> 8) & 0xFF, mod & 0xFF
        out_port = node.port(outp)
        if node.port(inp) is None or out_port is None:
            return STATUS_INVALID_FIELD, _ZERO64
        target, key = out_port, inp << 8 | outp
    else:
        target, key = port, 0
    if method == Method.SET:
        target.sl2vl[key] = bytes(data[:8])
    return STATUS_OK, target.sl2vl.get(key, DEFAULT_SL2VL).ljust(64, b"\0")


def vl_arbitration(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """14.2.5.9: blocks 1-2 are the low-priority table, 3-4 the high one, 32 entries
    each, as many as VLArb{Low,High}Cap allows."""
    node = port.node
    target = node.port(mod & 0xFFFF) if node.is_switch else port
    block = mod >> 16
    if target is None or not 1 <= block <= 4:
        return STATUS_INVALID_FIELD, _ZERO64
    cap = node.caps.vl_arb_low_cap if block <= 2 else node.caps.vl_arb_high_cap
    first = 0 if block in (1, 3) else 32
    if cap <= first:
        return STATUS_INVALID_FIELD, _ZERO64
    entries = min(32, cap - first)
    if method == Method.SET:
        target.vlarb[block] = bytes(data[: 2 * entries]).ljust(64, b"\0")
    return STATUS_OK, target.vlarb.get(block, _ZERO64)


def guid_info(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """14.2.5.5: GUIDs in blocks of 8 (the modifier names the block), GuidCap of them;
    GUID 0 is the port's own and cannot be set; a switch's are port 0's."""
    target = port.node.ports[0] if port.node.is_switch else port
    if target is None or mod * GUIDS_PER_BLOCK >= max(target.guid_cap, 1):
        return STATUS_INVALID_FIELD, _ZERO64
    if method == Method.SET:
        guids = GUID_INFO.unpack(data)
        if mod == 0:
            guids["GUID0"] = target.guid
        entries = min(GUIDS_PER_BLOCK, target.guid_cap - mod * GUIDS_PER_BLOCK)
        for name in _GUID_FIELDS[max(entries, 0) :]:  # beyond GuidCap: no entry
            guids[name] = 0
        target.guids[mod] = GUID_INFO.pack(guids)
    block = target.guids.get(mod)
    if block is None:
        block = GUID_INFO.pack({"GUID0": target.guid} if mod == 0 else {})
    return STATUS_OK, block


def mlnx_ext_port_info(sma: Sma, port: SimPort, method: int, mod: int, data: bytes) -> Reply:
    """Mellanox ExtendedPortInfo: FDR10, on the devices that have it (the same list
    libibnetdisc and OpenSM keep)."""
    node = port.node
    if not mlnx_ext_port_info_supported(node.fabric_node.vendid, node.fabric_node.devid):
        return STATUS_METHOD_ATTR_UNSUPPORTED, _ZERO64
    target = _target_port(port, mod & 0xFF)
    if target is None:
        return STATUS_INVALID_FIELD, _ZERO64
    if method == Method.SET:
        v = MLNX_EXT_PORT_INFO.unpack(data)
        target.state_change_enable = v["StateChangeEnable"]
        if v["LinkSpeedEnabled"]:
            target.fdr10_enabled = v["LinkSpeedEnabled"] & 1
    active = int(target.up and target.fabric_port.speed.fdr10)
    return STATUS_OK, MLNX_EXT_PORT_INFO.pack(
        {
            "StateChangeEnable": target.state_change_enable,
            "LinkSpeedSupported": 1,
            "LinkSpeedEnabled": target.fdr10_enabled,
            "LinkSpeedActive": active,
        }
    )
