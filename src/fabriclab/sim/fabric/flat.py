"""The fabric's hot state as flat arrays: what the native MAD core reads and counts in.

Every port of the fabric has a row (a node's rows are consecutive, one per port number
its model has, port 0 included; a number the model leaves empty has a row with
``present`` 0), every node an index.  The run-time objects (:mod:`.state`) keep these
values nowhere else: their attributes are properties over these arrays, so the Python
reference path and the native core (:mod:`fabriclab.sim.wire.native`) read and write
one state.  The arrays never change size once the fabric is built (the native core
holds their buffers, which makes resizing them fail rather than move them); a switch's
forwarding table is a bytearray that grows as the SM writes blocks, so the core fetches
it from :attr:`Flat.lfts` at every look-up.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from ...ib.enums import PhysState, PortState
from .portinfo import STORED

if TYPE_CHECKING:
    from .state import SimPort

ATTR_SIZE = 64  # an SMP's attribute data (NodeInfo, NodeDescription, PortInfo, SwitchInfo)


def _zeros(code: str, n: int) -> array:
    return array(code, bytes(array(code).itemsize * n))


class Flat:
    """The flat state of a fabric of ``nodes`` nodes and ``rows`` port rows."""

    __slots__ = (
        "_next",
        "first",
        "is_endport",
        "is_switch",
        "lft_cap",
        "lft_top",
        "lfts",
        "lid",
        "lmc",
        "mad_in",
        "mad_out",
        "ni",
        "ni_valid",
        "node",
        "node_desc",
        "nports",
        "num",
        "objs",
        "peer",
        "phys",
        "pi",
        "pi_valid",
        "pkeys",
        "present",
        "setv",
        "si",
        "si_valid",
        "state",
    )

    def __init__(self, nodes: int, rows: int):
        # --- per port row
        self.node = _zeros("i", rows)  # the node's index
        self.num = _zeros("H", rows)  # the port number
        self.present = _zeros("B", rows)  # whether the node has this port
        self.peer = array("i", [-1]) * rows  # the row at the other end of the link, or -1
        self.phys = _zeros("B", rows)  # PortPhysicalState
        self.state = _zeros("B", rows)  # PortState
        # LID and LMC as any int (what Python may set; the core hands back what is not
        # a LID it can route by)
        self.lid = _zeros("q", rows)
        self.lmc = _zeros("q", rows)
        self.is_endport = _zeros("B", rows)  # a CA port or a switch's port 0
        self.mad_in = _zeros("Q", rows)  # MADs that crossed the port, not yet counted
        self.mad_out = _zeros("Q", rows)
        self.pi = bytearray(ATTR_SIZE * rows)  # encoded PortInfo, LocalPortNum 0 ...
        self.pi_valid = _zeros("B", rows)  # ... when this is 1
        self.ni = bytearray(ATTR_SIZE * rows)  # NodeInfo as read through the port ...
        self.ni_valid = _zeros("B", rows)  # ... when this is 1 (filled when first read)
        self.pkeys: list = [None] * rows  # the port's P_Key table (a bytearray)
        # the PortInfo components a Set writes (but those above), a row of
        # len(portinfo.STORED) each, in that order
        self.setv = _zeros("Q", rows * len(STORED))
        self.objs: list = [None] * rows  # the SimPort of each row
        # --- per node
        self.is_switch = _zeros("B", nodes)
        self.first = _zeros("I", nodes)  # the row of its port 0
        self.nports = _zeros("I", nodes)  # how many rows it has (its highest port + 1)
        self.node_desc = bytearray(ATTR_SIZE * nodes)  # NodeDescription
        self.lfts: list = [None] * nodes  # a switch's LFT: a bytearray (LID -> port)
        self.lft_top = _zeros("I", nodes)  # a switch's LinearFDBTop
        self.lft_cap = _zeros("I", nodes)  # a switch's LinearFDBCap
        self.si = bytearray(ATTR_SIZE * nodes)  # a switch's encoded SwitchInfo ...
        self.si_valid = _zeros("B", nodes)  # ... when this is 1
        self._next = 0

    def add_node(self, index: int, nports: int, is_switch: bool) -> int:
        """Give node ``index`` its ``nports`` rows; its first row."""
        first = self._next
        self._next += nports
        self.first[index] = first
        self.nports[index] = nports
        self.is_switch[index] = int(is_switch)
        for num in range(nports):
            self.node[first + num] = index
            self.num[first + num] = num
        return first


_PORT_STATES = tuple(PortState(v) if v in PortState._value2member_map_ else v for v in range(256))
_PHYS_STATES = tuple(PhysState(v) if v in PhysState._value2member_map_ else v for v in range(256))


class _Row:
    """A port attribute kept at the port's row of the flat state's array of the same
    name; ``shown``: what each stored value reads as, when not the value itself."""

    def __init__(self, shown: tuple | None = None):
        self.shown = shown
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, port: FlatPort | None, owner: type | None = None) -> Any:
        if port is None:
            return self
        v = getattr(port._f, self.name)[port._r]
        return v if self.shown is None else self.shown[v]

    def __set__(self, port: FlatPort, v: Any) -> None:
        getattr(port._f, self.name)[port._r] = v


class _Column:
    """A PortInfo component a Set writes, kept in the port's row of the flat state's
    ``setv`` (its column: its place in portinfo.STORED)."""

    def __init__(self) -> None:
        self.i = -1

    def __set_name__(self, owner: type, name: str) -> None:
        self.i = STORED.index(name)

    def __get__(self, port: FlatPort | None, owner: type | None = None) -> Any:
        if port is None:
            return self
        return port._f.setv[port._r * _NSTORED + self.i]

    def __set__(self, port: FlatPort, v: int) -> None:
        port._f.setv[port._r * _NSTORED + self.i] = v


_NSTORED = len(STORED)


class FlatPort:
    """A port whose hot attributes are its row ``_r`` of the flat state ``_f``."""

    __slots__ = ("_f", "_r")

    def place(self, flat: Flat, row: int) -> None:
        """Make row ``row`` of ``flat`` this port's."""
        self._f, self._r = flat, row
        flat.objs[row] = self
        flat.present[row] = 1

    # the attributes kept as they are in the flat state's array of the same name
    phys = _Row(_PHYS_STATES)  # PortPhysicalState (a PhysState)
    state = _Row(_PORT_STATES)  # PortState (a PortState)
    lid = _Row()  # the base LID
    lmc = _Row()
    is_endport = _Row((False, True))  # has a LID of its own: a CA port, a switch's port 0
    mad_in = _Row()  # MADs received through the port, not yet in its counters
    mad_out = _Row()  # MADs sent through the port, not yet in its counters
    pkeys = _Row()  # the P_Key table, 2 bytes an entry

    # the PortInfo components a Set writes, each a column of setv (portinfo.STORED)
    mkey = _Column()
    gid_prefix = _Column()
    smlid = _Column()
    mkey_lease = _Column()
    width_enabled = _Column()
    link_down_def = _Column()
    mkey_protect = _Column()
    speed_enabled = _Column()
    neighbor_mtu = _Column()
    smsl = _Column()
    vl_high_limit = _Column()
    init_reply = _Column()
    vl_stall = _Column()
    hoq_life = _Column()
    op_vls = _Column()
    part_enf_in = _Column()
    part_enf_out = _Column()
    filter_raw_in = _Column()
    filter_raw_out = _Column()
    mkey_violations = _Column()
    pkey_violations = _Column()
    qkey_violations = _Column()
    client_rereg = _Column()
    mcast_pkey_trap = _Column()
    subnet_timeout = _Column()
    local_phy_err = _Column()
    overrun_err = _Column()
    speed_ext2_enabled = _Column()
    speed_ext_enabled = _Column()

    @property
    def peer(self) -> SimPort | None:
        """The port at the other end of the link, or None."""
        r = self._f.peer[self._r]
        return None if r < 0 else self._f.objs[r]

    @peer.setter
    def peer(self, q: SimPort | None) -> None:
        self._f.peer[self._r] = -1 if q is None else q._r

    @property
    def pi(self) -> bytes | None:
        """The encoded PortInfo (LocalPortNum 0), or None when it must be encoded anew."""
        f, r = self._f, self._r
        return bytes(f.pi[r * ATTR_SIZE : (r + 1) * ATTR_SIZE]) if f.pi_valid[r] else None

    @pi.setter
    def pi(self, v: bytes | None) -> None:
        f, r = self._f, self._r
        if v is None:
            f.pi_valid[r] = 0
        else:
            f.pi[r * ATTR_SIZE : (r + 1) * ATTR_SIZE] = v
            f.pi_valid[r] = 1


assert all(isinstance(FlatPort.__dict__.get(n), _Column) for n in STORED), (
    "a stored field lacks its column"
)
