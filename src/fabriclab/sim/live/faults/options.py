"""Fault options checked: what each kind of fault takes (``--period``, ``--width``,
``--ber``, ``--rate``, ``--gpus`` ...) on what kind of target, normalised to the options a
fault is kept with (:class:`.book.Fault`), or an error naming the first bad one.
"""

from __future__ import annotations

import math

from ....errors import InputError, Problem
from ....ib.caps import CAP2_IS_LINK_WIDTH_2X
from ....ib.rates import SPEEDS, WIDTHS
from ...fabric.state import SimPort
from .. import durations
from . import ber
from .targets import LINK, PORT, TRAY, Target, port_name

KINDS = ("down", "flap", "degrade", "errors", "drop", "nvlink")
# the options each kind takes (``fabriclab fault KIND --help``)
OPTIONS = {
    "down": (),
    "up": (),
    "flap": ("period", "count"),
    "degrade": ("width", "speed"),
    "errors": ("ber", "down_after"),
    "drop": ("rate", "seed"),
    "nvlink": ("gpus",),
}
MIN_PERIOD = 0.001  # the shortest flap period (a virtual clock carries out every change)
# The shortest flap period under wall time: each half (50 ms) is longer than what a wake-up
# of the server's loop may spend catching up (api.TICK_BUDGET, 20 ms), so the MADs, the
# admin socket and the flaps all get their turn; shorter ones are refused.
MIN_WALL_PERIOD = 0.1


def bad(where: str, what: str) -> InputError:
    """The error for a bad fault: ``where``, ``what`` is wrong."""
    return InputError([Problem(where, what)])


def flap_options(opts: dict, wall: bool) -> dict:
    """A flap's ``period`` (seconds) and ``count``, checked (the compute fabric's and the
    other networks' flaps alike)."""
    period = durations.seconds(opts.get("period", 2.0), "--period", MIN_PERIOD, 86400)
    if wall and period < MIN_WALL_PERIOD:
        raise bad(
            "--period",
            f"{period:g} s is shorter than the {MIN_WALL_PERIOD:g} s a wall clock can honour "
            f"(the server loop's tick); a virtual clock (up --virtual-clock) takes down to "
            f"{MIN_PERIOD:g} s",
        )
    count = _number(int, opts.get("count", 1), "--count")
    if not 1 <= count <= 100000:
        raise bad("--count", f"{count}: want 1 to 100000 flaps")
    return {"period": period, "count": count}


def check_options(kind: str, target: Target, opts: dict, wall: bool = False) -> dict:
    """The options of a fault of ``kind`` on ``target``, checked and normalised (an
    InputError naming the first bad one); ``wall``: the fabric runs on wall time."""
    where = target.text
    check_keys(kind, opts)
    if kind in ("flap", "degrade", "errors") and target.kind != LINK:
        raise bad(
            where, f"{kind} takes a link (SWITCH[port] or HOST/HCA[port]), not a {target.kind}"
        )
    if kind == "down" and target.kind == PORT:
        raise bad(where, "port 0 is not a link")
    if kind == "nvlink" and target.kind != TRAY:
        raise bad(where, f"nvlink takes a tray, not a {target.kind}")
    out: dict = {}
    if kind == "nvlink":
        out = {"gpus": _gpu_list(opts.get("gpus"))}
    if kind == "flap":
        out = flap_options(opts, wall)
    elif kind == "degrade":
        p = target.ports[0]
        out = _degrade_options(where, p, opts.get("width"), opts.get("speed"))
    elif kind == "errors":
        rate = _number(float, opts.get("ber", 0), "--ber")
        if not 0 < rate <= 1e-3:
            raise bad("--ber", f"{rate:g}: want a bit-error rate above 0, at most 1e-3")
        down_after = _number(int, opts.get("down_after", ber.DOWN_AFTER), "--down-after")
        if not 1 <= down_after <= 255:
            raise bad("--down-after", f"{down_after}: want 1 to 255 recoveries")
        out = {"ber": rate, "down_after": down_after}
    elif kind == "drop":
        rate = _number(float, opts.get("rate", 100), "--rate")
        if not 0 < rate <= 100:
            raise bad("--rate", f"{rate:g}: want a percentage above 0, at most 100")
        out = {"rate": rate, "seed": _number(int, opts.get("seed", 1), "--seed")}
    return out


def check_keys(kind: str, opts: dict) -> None:
    """Refuse an option a fault of ``kind`` does not take, naming it."""
    for key in opts:
        if key not in OPTIONS.get(kind, ()):
            known = ", ".join(sorted(OPTIONS.get(kind, ()))) or "none"
            raise bad("options", f"{kind} takes no option {str(key)[:40]!r} (options: {known})")


def _number(kind: type[int] | type[float], value, flag: str):
    """``value`` (a number, or its text as a scenario file may give it) as an int or a
    float; a bool, a fraction for an int, a NaN or anything else is refused."""
    v = value
    if isinstance(value, str) and len(value) < 40:
        try:
            v = kind(value.strip())
        except ValueError:
            pass
    want = "a whole number" if kind is int else "a number"
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise bad(flag, f"{str(value)[:40]!r}: want {want}")
    if isinstance(v, float) and not (math.isfinite(v) and (kind is float or v.is_integer())):
        raise bad(flag, f"{value!r}: want {want}")
    return kind(v)


def _gpu_list(gpus) -> list[int] | None:
    """``--gpus 0,1`` (or a list) as sorted GPU indices; None: the whole tray."""
    if gpus is None or gpus == "":
        return None
    items = gpus.split(",") if isinstance(gpus, str) else gpus
    if not isinstance(items, list | tuple):
        raise bad("--gpus", f"{gpus!r}: want GPU indices like 0,1")
    out = set()
    for g in items:
        text = str(g).strip()
        if not text.isdigit() or int(text) > 255:
            raise bad("--gpus", f"{g!r}: want GPU indices like 0,1")
        out.add(int(text))
    return sorted(out)


def _degrade_options(where: str, p: SimPort, width, speed) -> dict:
    if not width and not speed:
        raise bad(where, "degrade needs --width and/or --speed")
    peer = p.peer
    assert peer is not None
    out: dict = {}
    m = p.fabric_port
    if width:
        w = WIDTHS.get(str(width).lower())
        if w is None:
            raise bad("--width", f"{width!r}: want one of 1x, 2x, 4x, 8x, 12x")
        if w.lanes >= m.width.lanes:
            raise bad("--width", f"{w} is not narrower than the link's {m.width}")
        for q in (p, peer):
            if not q.width_supported & w.value:
                raise bad("--width", f"{port_name(q)} does not support {w}")
            if w.value == WIDTHS["2x"].value and not _cap_port(q).cap_mask2 & CAP2_IS_LINK_WIDTH_2X:
                # tools show 2x only where CapabilityMask2 says IsLinkWidth2xSupported
                # (libibmad dump.c; iblinkinfo reads it from a switch's port 0)
                raise bad("--width", f"{port_name(q)} has no IsLinkWidth2xSupported")
        out["width"] = w.token
    if speed:
        s = SPEEDS.get(str(speed).upper())
        if s is None:
            raise bad("--speed", f"{speed!r}: want one of {', '.join(SPEEDS)}")
        if s.order >= m.speed.order:
            raise bad("--speed", f"{s} is not slower than the link's {m.speed}")
        out["speed"] = s.token
    return out


def _cap_port(q: SimPort) -> SimPort:
    """The port whose CapabilityMask speaks for ``q`` (a switch's port 0)."""
    if q.node.is_switch:
        p0 = q.node.ports[0]
        return p0 if p0 is not None else q
    return q
