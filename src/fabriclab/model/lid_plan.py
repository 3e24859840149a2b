"""The LID plan: LIDs as the subnet manager is expected to give them, for every switch and
CA port the spec leaves without one, and the count that a fabric fits the unicast LIDs.

Switches take LIDs from ``lids.switch_base``, top tier first; then tray HCA ports in tray
order and the other CAs in build order take LIDs from ``lids.ca_base`` (default: 100, or
the next hundred above the switches).  A LID the spec gives is never handed out again.
"""

from __future__ import annotations

from ..ib.ids import LID_MAX, LID_MIN, UNICAST_LIDS
from ..spec.schema import LidPlan
from .assembly import spec_error
from .cluster import Tray
from .fabric import Fabric


def check_lid_budget(ca_ports: int, switches: int, where: str, extra_cas: int = 0) -> None:
    """Refuse, before anything is built, a fabric whose CA ports (``ca_ports`` and
    ``extra_cas``) and switches need more LIDs, one each, than a subnet has."""
    need = ca_ports + extra_cas + switches
    if need > UNICAST_LIDS:
        parts = f"{ca_ports + extra_cas} CA ports" + (
            f" and {switches} switches" if switches else ""
        )
        raise spec_error(
            where,
            f"{parts} need {need} LIDs, one each; a subnet has {UNICAST_LIDS} "
            f"unicast LIDs (0x0001-0x{LID_MAX:04X}, IBA 4.1.3)",
        )


def default_ca_base(switch_base: int, switches: int) -> int:
    """Where CA LIDs start when the plan gives no ``ca_base``: 100, or the next hundred
    above the switches' LIDs."""
    return max(100, (switch_base + switches + 99) // 100 * 100)


def assign_lids(fabric: Fabric, plan: LidPlan, trays: list[Tray]) -> None:
    """Give every switch and CA port without a LID one from the plan."""
    used: dict[int, str] = {}
    for n in fabric.nodes:
        if n.is_switch and n.lid:
            for lid in range(n.lid, n.lid + (1 << n.lmc)):
                used[lid] = n.desc
        elif not n.is_switch:
            for p in n.iter_ports():
                if p.lid:
                    for lid in range(p.lid, p.lid + (1 << p.lmc)):
                        used[lid] = n.desc
    switches = sorted(
        (n for n in fabric.nodes if n.is_switch and not n.lid), key=lambda n: -n.tier
    )  # stable: top tier first, then build order
    lid = plan.switch_base
    for n in switches:
        while lid in used:
            lid += 1
        if lid > LID_MAX:
            raise spec_error(
                "lids.switch_base",
                f"from LID {plan.switch_base}, the switches run "
                f"past the last unicast LID {LID_MAX} (0x{LID_MAX:X})",
            )
        n.lid = lid
        used[lid] = n.desc
        lid += 1
    base = (
        plan.ca_base
        if plan.ca_base is not None
        else default_ca_base(plan.switch_base, len(fabric.switches()))
    )
    lid = base
    # tray HCAs in tray order, then the other CAs in build order
    order = [h for t in trays for h in t.hcas]
    seen = {id(h) for h in order}
    order += [n for n in fabric.nodes if not n.is_switch and id(n) not in seen]
    wrapped = False
    for n in order:
        for p in n.iter_ports():
            if p.lid:
                continue
            while lid in used:
                lid += 1
            if lid > LID_MAX and plan.ca_base is None and not wrapped:
                # the default base left LIDs below it free; a fabric that fits the
                # unicast range (counted before building) fits there
                lid, wrapped = LID_MIN, True
                while lid in used:
                    lid += 1
            if lid > LID_MAX:
                raise spec_error(
                    "lids",
                    f"from LID {base}, the CA ports run past the last unicast "
                    f"LID {LID_MAX} (0x{LID_MAX:X})",
                )
            p.lid = lid
            used[lid] = n.desc
            lid += 1
