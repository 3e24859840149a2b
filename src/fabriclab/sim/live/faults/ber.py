"""The bit-error model: how a link with a bit-error rate (BER) moves its ends' error
counters as time passes.

Model (fabriclab's own; the IBA defines what each counter counts, not how often errors
come, so the pace is derived here and documented):

- A link transmits continuously: when there is no data it sends idle symbols (IBA
  Vol. 2, the physical layer's idle sequences), so bit errors happen on an idle link
  too.  Each receiver sees ``BER × signalling rate × seconds`` bit errors, the
  signalling rate being lanes × lane rate (libibmad's per-lane figure, e.g. 4 × 106.25
  Gb/s for 4x NDR).  At the BERs worth injecting, errors are isolated: each is one
  ``SymbolErrorCounter`` ("minor link errors detected on one or more physical lanes",
  IBA 16.1.3.5).
- A packet is received in error (``PortRcvErrors``) when one of its bits is hit:
  ``BER × data bits received`` (PortRcvData × 32), never more than the packets
  received.  The data are whatever crossed the link: MADs and the traffic engine's
  flows, read from the receiving port's own counters.
- Every :data:`LOCAL_PHY_ERRORS` symbol errors exceed the port's local physical error
  threshold once: ``LocalLinkIntegrityErrors`` counts it and the link runs error
  recovery, which succeeds (``LinkErrorRecoveryCounter``).
- A link whose recoveries since it last trained reach ``down_after`` gives up: the
  recovery fails, the link goes down (``LinkDownedCounter`` at both ends) and retrains.

Fractions of an error are carried over from one step to the next, so the counters grow
at exactly the pace the rate implies under the virtual clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...fabric.state import SimPort

# Symbol errors per LocalLinkIntegrityErrors: fabriclab's choice of the PortInfo
# LocalPhyErrors threshold (a 4-bit field the SM may set, IBA 14.2.5.6; none of the SMs
# here sets it).
LOCAL_PHY_ERRORS = 8
DOWN_AFTER = 16  # default: link error recoveries before the link is taken down
# ibqueryerrors' example thresholds (/etc/infiniband-diags/error_thresholds, commented
# out there): past these an event says the counter crossed its threshold
THRESHOLDS = {
    "SymbolErrorCounter": 10,
    "LinkErrorRecoveryCounter": 10,
    "LinkDownedCounter": 10,
    "PortRcvErrors": 10,
    "LocalLinkIntegrityErrors": 10,
}


def signalling_bps(p: SimPort) -> float:
    """The bits a second each direction of ``p``'s link carries (idle or not)."""
    m = p.fabric_port
    width = p.width_trained or m.width
    speed = p.speed_trained or m.speed
    return width.lanes * speed.lane_gbps * 1e9


@dataclass
class EndState:
    """One receiving end's carried-over fractions and counts since the fault began."""

    symbol_frac: float = 0.0
    packet_frac: float = 0.0
    symbols: int = 0  # symbol errors counted under this fault
    rcv_data: int | None = None  # PortRcvData when last looked at
    rcv_pkts: int | None = None
    totals: dict = field(default_factory=dict)  # counter -> counted under this fault

    @classmethod
    def at(cls, p: SimPort) -> EndState:
        """Port ``p`` as a fault starts on it: its packets so far are not this fault's."""
        raw = p.flush().raw
        return cls(rcv_data=raw["PortRcvData"], rcv_pkts=raw["PortRcvPkts"])

    def to_json(self) -> dict:
        """For the journal."""
        return dict(self.__dict__)


def step(p: SimPort, end: EndState, ber: float, seconds: float) -> dict[str, int]:
    """Count ``seconds`` of errors at receiving port ``p`` (its link up); what was added."""
    added: dict[str, int] = {}
    raw = p.flush().raw
    data, pkts = raw["PortRcvData"], raw["PortRcvPkts"]
    if end.rcv_data is None or end.rcv_pkts is None:
        end.rcv_data, end.rcv_pkts = data, pkts
    got_data, got_pkts = data - end.rcv_data, pkts - end.rcv_pkts
    end.rcv_data, end.rcv_pkts = data, pkts
    if not p.up or seconds <= 0:
        return added
    x = end.symbol_frac + ber * signalling_bps(p) * seconds
    sym = int(x)
    end.symbol_frac = x - sym
    y = end.packet_frac + ber * max(0, got_data) * 32
    bad = min(int(y), max(0, got_pkts))
    end.packet_frac = y - int(y) if bad == int(y) else 0.0
    if sym:
        before = end.symbols // LOCAL_PHY_ERRORS
        end.symbols += sym
        integrity = end.symbols // LOCAL_PHY_ERRORS - before
        added["SymbolErrorCounter"] = sym
        if integrity:
            added["LocalLinkIntegrityErrors"] = integrity
            added["LinkErrorRecoveryCounter"] = integrity
    if bad:
        added["PortRcvErrors"] = bad
    c = p.counters
    for name, n in added.items():
        c.add(name, n)
        end.totals[name] = end.totals.get(name, 0) + n
    return added
