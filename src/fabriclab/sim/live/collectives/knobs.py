"""The NCCL_* environment variables the collective model honours, read as NCCL reads
them; a value NCCL would refuse is a one-line error naming the variable.

- ``NCCL_IB_HCA``: which HCAs NCCL uses, a comma list of ``name[:port]`` entries,
  prefixes of device names unless the list starts with ``=`` (exact names), all but
  those when it starts with ``^`` (``^=`` both) (src/misc/utils.cc parseStringList and
  matchIfList, src/transport/net_ib/init.cc).
- ``NCCL_ALGO`` and ``NCCL_PROTO``: comma lists of NCCL's names, case-insensitive, all
  but those after ``^``, and ``func:list`` entries after ``;`` for one collective
  (src/graph/tuning.cc parseList).
- ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``: bounds on the channels (1 to 64,
  MAXCHANNELS).
- ``NCCL_CROSS_NIC``: 0, 1 or 2 (default): whether a ring may leave one node by one
  NIC and enter the next by another (src/graph/search.cc).
- ``NCCL_COLLNET_ENABLE``: 1 to let CollNet (SHARP) reduce in the switches.
- ``NCCL_IB_ADAPTIVE_ROUTING``: 0 keeps NCCL's queue pairs off adaptive routing (on
  by default on InfiniBand, src/transport/net_ib), so the tables' paths are used even
  where the switches adapt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ....errors import InputError, Problem
from . import tuning

MAXCHANNELS = 64  # NCCL's MAXCHANNELS (src/include/device.h)


def _bad(var: str, what: str) -> InputError:
    return InputError([Problem(var, what)])


@dataclass(frozen=True)
class HcaFilter:
    """NCCL_IB_HCA parsed: entries of (name, port or -1), exact or by prefix, kept or
    left out."""

    entries: tuple[tuple[str, int], ...] = ()
    exact: bool = False
    exclude: bool = False

    def allows(self, name: str, port: int = 1) -> bool:
        """Whether NCCL uses HCA ``name`` (its port ``port``)."""
        if not self.entries:
            return True
        hit = any(
            (name == n if self.exact else name.startswith(n)) and p in (-1, port)
            for n, p in self.entries
        )
        return hit != self.exclude

    @staticmethod
    def parse(text: str | None) -> HcaFilter:
        if not text:
            return HcaFilter()
        exclude = text.startswith("^")
        text = text[1:] if exclude else text
        exact = text.startswith("=")
        text = text[1:] if exact else text
        entries = []
        for entry in text.split(","):
            name, _, rest = entry.partition(":")
            if not name:
                continue
            port = rest.split(":")[0]
            if port and not port.isdigit():
                raise _bad("NCCL_IB_HCA", f"port {port!r} of {name!r} is not a number")
            entries.append((name, int(port) if port else -1))
        if not entries:
            raise _bad("NCCL_IB_HCA", f"no HCA named in {text!r}")
        return HcaFilter(tuple(entries), exact, exclude)


def _list(var: str, text: str | None, names: tuple[str, ...], func: str) -> set[int] | None:
    """NCCL_ALGO/NCCL_PROTO for collective ``func`` (NCCL's name): the indices enabled,
    None when unset."""
    if text is None or not text.strip():
        return None
    enabled: set[int] | None = None
    for k, part in enumerate(text.split(";")):
        prefix, sep, elems = part.partition(":")
        if not sep:
            if k:
                raise _bad(var, "every entry but the first needs a collective: 'allreduce:...'")
            prefix, elems = "", part
        if prefix and prefix.lower() not in (f.lower() for f in tuning.FUNCS):
            raise _bad(var, f"unknown collective {prefix!r}; one of: {', '.join(tuning.FUNCS)}")
        unset = elems.startswith("^")
        items = elems[1:] if unset else elems
        chosen = set()
        for e in items.split(","):
            e = e.strip()
            if not e:
                continue
            low = [n.lower() for n in names]
            if e.lower() not in low:
                raise _bad(var, f"unknown name {e!r}; one of: {', '.join(names)}")
            chosen.add(low.index(e.lower()))
        if prefix and prefix.lower() != func.lower():
            continue
        enabled = (set(range(len(names))) - chosen) if unset else chosen
    return enabled


def _int(env: Mapping[str, str], var: str, default: int, lo: int, hi: int) -> int:
    text = env.get(var)
    if text is None or text == "":
        return default
    try:
        v = int(text, 0)
    except ValueError:
        raise _bad(var, f"want an integer, not {text!r}") from None
    if not lo <= v <= hi:
        raise _bad(var, f"{v} is out of range {lo}-{hi}")
    return v


@dataclass(frozen=True)
class Knobs:
    """What the NCCL_* variables say, for one collective (NCCL's name in ``func``)."""

    hca: HcaFilter
    algos: set[int] | None  # None: NCCL chooses among all
    protos: set[int] | None
    min_channels: int
    max_channels: int
    cross_nic: int
    collnet: bool
    adaptive: bool = True  # NCCL_IB_ADAPTIVE_ROUTING

    @staticmethod
    def read(env: Mapping[str, str], func: str) -> Knobs:
        """The knobs in ``env`` (the NCCL_* variables; others ignored)."""
        lo = _int(env, "NCCL_MIN_NCHANNELS", 1, 1, MAXCHANNELS)
        hi = _int(env, "NCCL_MAX_NCHANNELS", MAXCHANNELS, 1, MAXCHANNELS)
        if lo > hi:
            raise _bad("NCCL_MIN_NCHANNELS", f"{lo} is above NCCL_MAX_NCHANNELS {hi}")
        return Knobs(
            hca=HcaFilter.parse(env.get("NCCL_IB_HCA")),
            algos=_list("NCCL_ALGO", env.get("NCCL_ALGO"), tuning.ALGOS, func),
            protos=_list("NCCL_PROTO", env.get("NCCL_PROTO"), tuning.PROTOS, func),
            min_channels=lo,
            max_channels=hi,
            cross_nic=_int(env, "NCCL_CROSS_NIC", 2, 0, 2),
            collnet=_int(env, "NCCL_COLLNET_ENABLE", 0, 0, 1) == 1,
            adaptive=_int(env, "NCCL_IB_ADAPTIVE_ROUTING", 1, 0, 1) == 1,
        )


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """The NCCL_* variables of ``env`` (what a request carries to the fabric)."""
    return {k: v for k, v in env.items() if k.startswith("NCCL_")}
