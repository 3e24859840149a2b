"""Link speeds and widths as InfiniBand encodes them, and the tokens the tools print.

Encodings are the PortInfo field values of the InfiniBand Architecture Specification
(Vol. 1, 14.2.5.6): LinkWidth{Supported,Enabled,Active}, LinkSpeedActive (SDR..QDR),
LinkSpeedExtActive (FDR..NDR) and LinkSpeedExt2Active (XDR).  ``ibnetdiscover``'s
``dump_linkspeedext_compat`` maps the aggregated extended value 32 to "XDR"; rdma-core
v44 (Debian 12) predates XDR and prints "???" for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Speed:
    """A link speed (SDR ... XDR) and how each tool and attribute shows it."""

    token: str  # as ibnetdiscover prints it
    lane_gbps: float  # iblinkinfo's per-lane figure
    data_gbps_4x: int  # marketing rate of a 4x link (ibstat "Rate", sysfs rate)
    speed: int  # LinkSpeedActive value
    ext: int  # LinkSpeedExtActive value (0 = none)
    ext2: int = 0  # LinkSpeedExt2Active value (0 = none)
    fdr10: bool = False  # Mellanox ExtPortInfo LinkSpeedActive bit
    order: int = 0

    def __str__(self) -> str:
        return self.token


SPEEDS: dict[str, Speed] = {
    s.token: s
    for s in (
        Speed("SDR", 2.5, 10, 1, 0, order=1),
        Speed("DDR", 5.0, 20, 2, 0, order=2),
        Speed("QDR", 10.0, 40, 4, 0, order=3),
        Speed("FDR10", 10.3125, 40, 4, 0, fdr10=True, order=4),
        Speed("FDR", 14.0625, 56, 4, 1, order=5),
        Speed("EDR", 25.78125, 100, 4, 2, order=6),
        Speed("HDR", 53.125, 200, 4, 4, order=7),
        Speed("NDR", 106.25, 400, 4, 8, order=8),
        Speed("XDR", 212.5, 800, 4, 0, ext2=1, order=9),
    )
}
# A port whose speed the tool could not name ("4x ???" in real dumps).
UNKNOWN_SPEED = Speed("???", 0.0, 0, 0, 0, order=0)


@dataclass(frozen=True)
class Width:
    """A link width (1x ... 12x) and its LinkWidthActive encoding."""

    token: str  # "4x"
    lanes: int
    value: int  # LinkWidthActive encoding

    def __str__(self) -> str:
        return self.token


WIDTHS: dict[str, Width] = {
    w.token: w
    for w in (
        Width("1x", 1, 1),
        Width("4x", 4, 2),
        Width("8x", 8, 4),
        Width("12x", 12, 8),
        Width("2x", 2, 16),
    )
}
UNKNOWN_WIDTH = Width("??", 0, 0)


def speed(token: str) -> Speed:
    """Look a speed up by token, case-insensitively; KeyError names the known ones."""
    try:
        return SPEEDS[token.upper()]
    except KeyError:
        raise KeyError(f"unknown rate {token!r} (known: {', '.join(SPEEDS)})") from None


def width(token: str) -> Width:
    """Look a width up by token, case-insensitively; KeyError names the known ones."""
    try:
        return WIDTHS[token.lower()]
    except KeyError:
        raise KeyError(f"unknown width {token!r} (known: {', '.join(WIDTHS)})") from None


def slower(a: Speed, b: Speed) -> Speed:
    """The speed two ends negotiate: the slower of the two."""
    return a if a.order <= b.order else b


def narrower(a: Width, b: Width) -> Width:
    """The width two ends negotiate: the narrower of the two."""
    return a if a.lanes <= b.lanes else b


# Data rate of one lane after line encoding, Gb/s: 8b/10b for SDR/DDR/QDR, 64b/66b for
# FDR10/FDR/EDR, RS(544,514) FEC with 256b/257b framing for HDR/NDR/XDR (53.125 x 514/544
# x 256/257 = 50.000 exactly).  The per-lane figures 2, 4, 8, 13.64, 25, 50 and 100 Gb/s
# are those of the InfiniBand rate tables (infiniband.jp "InfiniBand 規格"; NVIDIA's NDR
# glossary gives 4X SDR ~8 and 4X FDR ~54.54 Gb/s); that HDR/NDR/XDR use exactly this FEC
# framing is not confirmed by a public primary source, and FDR10's 10.3125 Gb/s lane is
# plain 10 Gb/s data under 64b/66b.
LANE_DATA_GBPS: dict[str, float] = {
    "SDR": 2.5 * 8 / 10,
    "DDR": 5.0 * 8 / 10,
    "QDR": 10.0 * 8 / 10,
    "FDR10": 10.3125 * 64 / 66,
    "FDR": 14.0625 * 64 / 66,
    "EDR": 25.78125 * 64 / 66,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}


def data_bytes_per_s(w: Width, s: Speed) -> float:
    """What a link can carry, in bytes per second: lanes x each lane's data rate after
    encoding (0 for a width or speed nobody knows)."""
    return w.lanes * LANE_DATA_GBPS.get(s.token, 0.0) * 1e9 / 8


def link_gbps(w: Width, s: Speed) -> float:
    """Data rate of a link in Gb/s, as ibstat's "Rate" and sysfs report it."""
    return s.data_gbps_4x * w.lanes / 4


def width_or_unknown(token: str) -> Width:
    """A width token as tools print it; anything unrecognised is the "??" width."""
    return WIDTHS.get(token.lower(), UNKNOWN_WIDTH)


def speed_or_unknown(token: str) -> Speed:
    """A speed token as tools print it; anything unrecognised is the "???" speed."""
    t = token.upper()
    return SPEEDS.get(t, UNKNOWN_SPEED)
