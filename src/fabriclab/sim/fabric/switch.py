"""A switch's forwarding state at run time: SwitchInfo and the forwarding tables, the
linear one (and LinearFDBTop) kept in the fabric's flat state (:mod:`.flat`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...ib import devices
from ...ib.mad.layouts import SWITCH_INFO
from .flat import ATTR_SIZE, Flat
from .portinfo import FILTER_RAW, PART_ENFORCE_IN, PART_ENFORCE_OUT

if TYPE_CHECKING:
    from .state import Generation


class SimSwitch:
    """A switch's forwarding state (SwitchInfo and the forwarding tables)."""

    __slots__ = (
        "_f",
        "_i",
        "caps",
        "def_mcast_not_prim",
        "def_mcast_prim",
        "def_port",
        "enhanced_port0",
        "gen",
        "lifetime",
        "mft",
        "mft_top",
        "state_change",
    )
    _f: Flat
    _i: int

    def __init__(
        self,
        caps: devices.ManagementCaps,
        enhanced_port0: bool,
        gen: Generation,
        flat: Flat | None = None,
        index: int = 0,
    ):
        # the LFT and LinearFDBTop live in the fabric's flat state (:mod:`.flat`), as
        # does the encoded SwitchInfo, forgotten whenever an attribute is set
        object.__setattr__(self, "_f", flat if flat is not None else Flat(index + 1, 0))
        object.__setattr__(self, "_i", index)
        self._f.lft_cap[index] = caps.linear_fdb_cap
        self.caps = caps
        self.gen = gen
        self.enhanced_port0 = enhanced_port0
        self.lft = bytearray()  # LID -> out port; grows as the SM writes blocks; 0xFF = none
        self.lft_top = 0
        self.mft: dict[tuple[int, int], bytes] = {}  # (block, position) -> 64 bytes
        self.mft_top = 0
        self.lifetime = 0
        self.state_change = 1  # a switch that just came up reports a port change
        self.def_port = 0
        self.def_mcast_prim = 0xFF
        self.def_mcast_not_prim = 0xFF

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        self._f.si_valid[self._i] = 0

    @property
    def lft(self) -> bytearray:
        """LID -> out port; grows as the SM writes blocks; 0xFF = none."""
        return self._f.lfts[self._i]

    @lft.setter
    def lft(self, value: bytearray) -> None:
        self._f.lfts[self._i] = value

    @property
    def lft_top(self) -> int:
        """LinearFDBTop."""
        return self._f.lft_top[self._i]

    @lft_top.setter
    def lft_top(self, value: int) -> None:
        self._f.lft_top[self._i] = value
        self._f.si_valid[self._i] = 0

    def out_port(self, lid: int) -> int:
        """The LFT entry for ``lid``: a port number, or 0xFF for "not routed"."""
        if lid > self.lft_top or lid >= len(self.lft):
            return 0xFF
        return self.lft[lid]

    def write_lft_block(self, block: int, data: bytes) -> None:
        """Set the LFT entries of LIDs 64 * block ... 64 * block + 63."""
        end = (block + 1) * 64
        if len(self.lft) < end:
            self.lft.extend(b"\xff" * (end - len(self.lft)))
        self.lft[block * 64 : end] = data[:64]
        self.gen.bump(switch=self)

    def lft_block(self, block: int) -> bytes:
        """The LFT entries of a block (0xFF where never set)."""
        chunk = bytes(self.lft[block * 64 : (block + 1) * 64])
        return chunk + b"\xff" * (64 - len(chunk))

    def switch_info(self) -> bytes:
        """The encoded SwitchInfo."""
        f, i = self._f, self._i
        at = i * ATTR_SIZE
        if f.si_valid[i]:
            return bytes(f.si[at : at + ATTR_SIZE])
        si = self._encode_switch_info()
        f.si[at : at + ATTR_SIZE] = si
        f.si_valid[i] = 1
        return si

    def _encode_switch_info(self) -> bytes:
        c = self.caps
        return SWITCH_INFO.pack(
            {
                "LinearFdbCap": c.linear_fdb_cap,
                "McastFdbCap": c.mcast_fdb_cap,
                "LinearFdbTop": self.lft_top,
                "DefPort": self.def_port,
                "DefMcastPrimPort": self.def_mcast_prim,
                "DefMcastNotPrimPort": self.def_mcast_not_prim,
                "LifeTime": self.lifetime,
                "StateChange": self.state_change,
                "OptSLtoVLMapping": 1,
                "LidsPerPort": 0,
                "PartEnforceCap": c.part_enforce_cap,
                "InboundPartEnf": PART_ENFORCE_IN,
                "OutboundPartEnf": PART_ENFORCE_OUT,
                "FilterRawInbound": FILTER_RAW,
                "FilterRawOutbound": FILTER_RAW,
                "EnhancedPort0": int(self.enhanced_port0),
                "MulticastFDBTop": self.mft_top,
            }
        )
