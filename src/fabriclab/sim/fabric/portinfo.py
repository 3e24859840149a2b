"""PortInfo as a port holds it: each component once, as a row saying where its value comes
from and whether (and how) a subnet manager's Set changes it.

The encoding (:func:`encode`) and the SMA's Set (:func:`apply`) are both made from the
one table, :data:`COMPONENTS`, as libibmad's ``fields.c`` keeps every MAD field once.
Which components an SM may write are the PortInfo table's RW components (IBA Vol. 1,
14.2.5.6); the rest - capabilities, Supported/Active, LocalPortNum, DiagCode, GUIDCap,
RespTimeValue, MaxCreditHint, LinkRoundTripLatency - are read-only.  OpenSM writes the
RW ones from its copy of the port's PortInfo (osm_link_mgr.c, osm_pkey_mgr.c), so each
must read back as set.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from ...ib.mad.layouts import PORT_INFO

# a port: a :class:`.state.SimPort` (which encodes itself through this module, so the
# type is not imported here)
SimPort = Any

# What fabriclab's switches enforce, as SwitchInfo advertises it (14.2.5.4): partition
# checks in both directions on every external port (fabriclab.sim.fabric.partitions.enforce
# runs them at the ingress and egress switch ports, by the port's PartEnforceInb/Outb),
# with a P_Key table of PartitionEnforcementCap entries per external port (64, the table
# size ibsim gives Mellanox switches).  Raw packets are never carried, so none are
# filtered: FilterRawInbound/Outbound stay 0 (ibsim advertises them, switchinfo byte 16 =
# 0x30).
PART_ENFORCE_IN = PART_ENFORCE_OUT = 1
FILTER_RAW = 0

Getter = Callable[[SimPort], int]
# the port attributes kept in the fabric's flat state (:mod:`.flat`), as arrays of ints
FLAT = frozenset(("lid", "lmc", "state", "phys"))
Setter = Callable[[SimPort, int], None]


@dataclass(frozen=True)
class Component:
    """One PortInfo component: its field in :data:`fabriclab.ib.mad.layouts.PORT_INFO`,
    how a port's value is read, and how a Set applies a value (None: read-only)."""

    field: str
    get: Getter
    set: Setter | None
    attr: str | None = None  # the port's attribute holding it, if one does


# --- how a Set applies a value ------------------------------------------------------------


# How each Set rule is told to the native MAD core (sim/wire/madcore/set.c): a rule's
# kind, then what it needs (an "enabled" field's all-supported value and its Supported
# component's field; whether a switch-external field is offered).
RULE_LINK, RULE_STORE, RULE_ENDPORT, RULE_NONZERO, RULE_ENABLED, RULE_WIDTH, RULE_EXTERNAL = range(
    7
)


def _code(store, line: str, rule: tuple | None = None):
    """``store`` (a setter, or a getter) with the Python that does the same to ``p``
    from the value ``{v}`` (or reads it: an expression), for the straight-line code of
    :func:`_applier` and :func:`_encoder`; a setter's ``rule`` for the native core."""
    store.code = line
    store.rule = rule
    return store


def _store(attr: str) -> Setter:
    """Kept as written."""

    def store(p: SimPort, v: int) -> None:
        setattr(p, attr, v)

    return _code(store, f"p.{attr} = {{v}}", (RULE_STORE,))


def _endport(attr: str) -> Setter:
    """Kept by end ports (CA ports and switch port 0); a switch's external ports have no
    LID, M_Key or SM of their own and ignore it."""

    def store(p: SimPort, v: int) -> None:
        if p.is_endport:
            setattr(p, attr, v)

    return _code(store, f"if endport: p.{attr} = {{v}}", (RULE_ENDPORT,))


def _nonzero(attr: str) -> Setter:
    """0 means "no change" (14.2.5.6)."""

    def store(p: SimPort, v: int) -> None:
        if v:
            setattr(p, attr, v)

    return _code(store, f"if {{v}}: p.{attr} = {{v}}", (RULE_NONZERO,))


def _enabled(attr: str, all_supported: int, supported: str | None) -> Setter:
    """An "enabled" field: 0 means no change; ``all_supported`` means every supported
    value (``supported`` names the port's Supported field; None: the fixed 0x7 of
    SDR, DDR, QDR)."""

    def store(p: SimPort, v: int) -> None:
        if v:
            if v == all_supported:
                v = getattr(p, supported) if supported else 0x7
            setattr(p, attr, v)

    every = f"p.{supported}" if supported else "0x7"
    return _code(
        store,
        f"if {{v}}: p.{attr} = {every} if {{v}} == {all_supported} else {{v}}",
        (RULE_ENABLED, all_supported, supported),
    )


def _width_enabled(p: SimPort, v: int) -> None:
    """LinkWidthEnabled: 0 no change, 0xFF every supported width, else what of the
    value the port supports."""
    if v:
        p.width_enabled = p.width_supported if v == 0xFF else v & p.width_supported


def _switch_external(attr: str, offered: int = 1) -> Setter:
    """Partition enforcement and raw filtering exist on switch external ports only
    (14.2.5.6: reserved elsewhere), raw filtering only where SwitchInfo offers it."""

    def store(p: SimPort, v: int) -> None:
        if offered and p.node.is_switch and p.num != 0:
            setattr(p, attr, v)

    return _code(
        store, f"if external: p.{attr} = {{v}}" if offered else "pass", (RULE_EXTERNAL, offered)
    )


def _link(p: SimPort, v: int) -> None:
    """LinkState and PortPhysicalState are requests, not values: the SMA checks them
    and carries them out through the link's state machine (:mod:`.sma`, :mod:`.links`)."""


_code(_link, "pass", (RULE_LINK,))
_code(
    _width_enabled,
    "if {v}: p.width_enabled = p.width_supported if {v} == 0xFF else {v} & p.width_supported",
    (RULE_WIDTH, "width_supported"),
)


# --- values that are not a port attribute as such --------------------------------------


def _caps(name: str) -> Getter:
    return _code(lambda p: getattr(p.node.caps, name), f"caps.{name}")


def _const(value: int) -> Getter:
    return _code(lambda p: value, str(value))


def _width_active(p: SimPort) -> int:
    """The width the link trained at (a degraded link's, else as cabled); port 0: 4x."""
    if not p.num:
        return 2
    width = p.width_trained or p.fabric_port.width
    return width.value if width else 2


def _speed(p: SimPort):
    return (p.speed_trained or p.fabric_port.speed) if p.num else None


def _speed_active(p: SimPort) -> int:
    """LinkSpeedActive of the link's speed (a degraded link's, else as cabled); port 0:
    SDR."""
    s = _speed(p)
    return s.speed if s else 1


def _speed_ext_active(p: SimPort) -> int:
    s = _speed(p)
    return s.ext if s else 0


def _speed_ext2_active(p: SimPort) -> int:
    s = _speed(p)
    return s.ext2 if s else 0


def _row(field: str, get: str | Getter, set: Setter | None = None) -> Component:
    if isinstance(get, str):
        return Component(field, attrgetter(get), set, get)
    return Component(field, get, set)


# Every component the fabric's ports show, in PortInfo's order.  A component not listed
# reads 0 (LocalPortNum is spliced in per SMP, by where it came in).
COMPONENTS: tuple[Component, ...] = (
    _row("Mkey", "mkey", _endport("mkey")),
    _row("GidPrefix", "gid_prefix", _endport("gid_prefix")),
    _row("Lid", "lid", _endport("lid")),
    _row("SMLid", "smlid", _endport("smlid")),
    _row("CapMask", "cap_mask"),
    _row("MkeyLeasePeriod", "mkey_lease", _endport("mkey_lease")),
    _row("LinkWidthEnabled", "width_enabled", _width_enabled),
    _row("LinkWidthSupported", "width_supported"),
    _row("LinkWidthActive", _width_active),
    _row("LinkSpeedSupported", _const(0x7)),  # SDR, DDR, QDR
    _row("LinkState", "state", _link),
    _row("PhysLinkState", "phys", _link),
    _row("LinkDownDefState", "link_down_def", _nonzero("link_down_def")),
    _row("ProtectBits", "mkey_protect", _endport("mkey_protect")),
    _row("LMC", "lmc", _endport("lmc")),
    _row("LinkSpeedActive", _speed_active),
    _row("LinkSpeedEnabled", "speed_enabled", _enabled("speed_enabled", 0xF, None)),
    _row("NeighborMTU", "neighbor_mtu", _nonzero("neighbor_mtu")),
    _row("SMSL", "smsl", _endport("smsl")),
    _row("VLCap", _caps("vl_cap")),
    _row("VLHighLimit", "vl_high_limit", _store("vl_high_limit")),
    _row("VLArbHighCap", _caps("vl_arb_high_cap")),
    _row("VLArbLowCap", _caps("vl_arb_low_cap")),
    _row("InitReply", "init_reply", _store("init_reply")),
    _row("MtuCap", _caps("mtu_cap")),
    _row("VLStallCount", "vl_stall", _store("vl_stall")),
    _row("HoqLife", "hoq_life", _store("hoq_life")),
    _row("OperVLs", "op_vls", _nonzero("op_vls")),
    _row("PartEnforceInb", "part_enf_in", _switch_external("part_enf_in")),
    _row("PartEnforceOutb", "part_enf_out", _switch_external("part_enf_out")),
    _row("FilterRawInb", "filter_raw_in", _switch_external("filter_raw_in", FILTER_RAW)),
    _row("FilterRawOutb", "filter_raw_out", _switch_external("filter_raw_out", FILTER_RAW)),
    # 16-bit violation counters: the SM may clear them
    _row("MkeyViolations", "mkey_violations", _store("mkey_violations")),
    _row("PkeyViolations", "pkey_violations", _store("pkey_violations")),
    _row("QkeyViolations", "qkey_violations", _store("qkey_violations")),
    _row("GuidCap", "guid_cap"),
    _row("ClientReregister", "client_rereg", _endport("client_rereg")),
    _row("McastPkeyTrapSuppressionEnabled", "mcast_pkey_trap", _endport("mcast_pkey_trap")),
    _row("SubnetTimeout", "subnet_timeout", _endport("subnet_timeout")),
    _row("RespTimeVal", "resp_time"),
    _row("LocalPhysErr", "local_phy_err", _store("local_phy_err")),
    _row("OverrunErr", "overrun_err", _store("overrun_err")),
    _row("LinkSpeedExtActive2", _speed_ext2_active),
    _row("LinkSpeedExtSupported2", "speed_ext2_supported"),
    _row(
        "LinkSpeedExtEnabled2",
        "speed_ext2_enabled",
        _enabled("speed_ext2_enabled", 7, "speed_ext2_supported"),
    ),
    _row("CapabilityMask2", "cap_mask2"),
    _row("LinkSpeedExtActive", _speed_ext_active),
    _row("LinkSpeedExtSupported", "speed_ext_supported"),
    _row(
        "LinkSpeedExtEnabled",
        "speed_ext_enabled",
        _enabled("speed_ext_enabled", 31, "speed_ext_supported"),
    ),
)

SETTABLE: tuple[Component, ...] = tuple(c for c in COMPONENTS if c.set is not None)
read_settable = PORT_INFO.getter(*(c.field for c in SETTABLE))
_SET_AT = {c.field: i for i, c in enumerate(SETTABLE)}
assert all(c.attr is not None for c in SETTABLE), "a settable component without its attribute"
# The settable components a port keeps in the flat state's ``setv`` (one column each, in
# this order: :mod:`.flat`), besides those in arrays of their own (:data:`FLAT`); the
# native core applies a PortInfo Set to them.
STORED: tuple[str, ...] = tuple(str(c.attr) for c in SETTABLE if c.attr not in FLAT)
_STORED_AT = {name: i for i, name in enumerate(STORED)}


def _flat_code(code: str) -> str:
    """``code`` with each stored attribute ``p.NAME`` read or written in the flat state's
    row (``sv[b + i]``) instead of through its property: a tenth of the cost."""
    return re.sub(
        r"\bp\.(\w+)",
        lambda m: f"sv[b + {_STORED_AT[m[1]]}]" if m[1] in _STORED_AT else m[0],
        code,
    )


def _encoder() -> Callable[[SimPort], bytes]:
    """:func:`encode`, generated as straight-line code from the table (as the codec's
    packers are): a loop over the rows would cost it half again as much, and the SMA
    encodes a port's PortInfo anew after every change."""
    scope: dict = {"pack": PORT_INFO.packer(*(c.field for c in COMPONENTS))}
    args = []
    for i, c in enumerate(COMPONENTS):
        code = getattr(c.get, "code", None)
        if c.attr in FLAT:  # read from the flat state's array itself
            args.append(f"{c.field}=f.{c.attr}[r]")
        elif c.attr in _STORED_AT:
            args.append(f"{c.field}=sv[b + {_STORED_AT[c.attr]}]")
        elif c.attr is not None:
            args.append(f"{c.field}=p.{c.attr}")
        elif code is not None:
            args.append(f"{c.field}={code}")
        else:
            scope[f"get{i}"] = c.get
            args.append(f"{c.field}=get{i}(p)")
    head = f"    f, r, caps = p._f, p._r, p.node.caps\n    sv, b = f.setv, r * {len(STORED)}\n"
    exec(f"def encode(p):\n{head}    return pack({', '.join(args)})\n", scope)
    return scope["encode"]


# Port ``p``'s PortInfo (LocalPortNum 0: it depends on where an SMP came in).
encode = _encoder()


def written(values: tuple[int, ...], field: str) -> int:
    """The value a Set wrote for ``field`` (one of :data:`SETTABLE`'s), out of
    :func:`read_settable`'s tuple."""
    return values[_SET_AT[field]]


def _applier() -> Callable[[SimPort, tuple[int, ...]], None]:
    """:func:`apply`, generated as straight-line code from the table's rules (each
    setter's ``code``; a loop calling them costs three times as much, and OpenSM sets
    every port's PortInfo several times while it brings a subnet up)."""
    scope: dict = {}
    names = [f"v{i}" for i in range(len(SETTABLE))]
    lines = [
        f"    {', '.join(names)}, = values",
        "    endport = p.is_endport",
        "    external = p.node.is_switch and p.num != 0",
        f"    sv, b = p._f.setv, p._r * {len(STORED)}",
    ]
    for i, c in enumerate(SETTABLE):
        code = getattr(c.set, "code", None)
        if code is None:
            scope[f"set{i}"] = c.set
            code = f"set{i}(p, {{v}})"
        lines.append("    " + _flat_code(code.format(v=f"v{i}")))
    exec("def apply(p, values):\n" + "\n".join(lines) + "\n", scope)
    return scope["apply"]


# Apply the writable components a Set carries (:func:`read_settable`'s tuple) to ``p``,
# each by its rule; LinkState and PortPhysicalState are left to the caller.
apply = _applier()
