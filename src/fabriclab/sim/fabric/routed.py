"""A fabric brought up as if a subnet manager had already run (``fabriclab up --routed``).

What OpenSM leaves behind after its first sweep on this fabric (read back from the
ports after a real ``opensm -o`` here, and checked against OpenSM's sources: the
defaults are include/opensm/osm_base.h's OSM_DEFAULT_*, set in opensm/osm_subnet.c):

- every end port keeps the LID of the spec's LID plan, with LMC 0 (OpenSM's ``lmc``
  default, opensm/osm_subnet.c; osm_lid_mgr.c keeps a valid LID it finds), the master
  SM's LID in SMLID, MasterSMSL 0 (``sm_sl``), SubnetTimeout 18 (``subnet_timeout``),
  M_Key 0 with no lease and no protection (``m_key``, ``m_key_lease_period``,
  ``m_key_protect_bits``), the default GID prefix (``subnet_prefix``);
- every port whose link is up is ACTIVE (osm_link_mgr.c takes them INIT > ARMED >
  ACTIVE), with the error thresholds OpenSM writes (LocalPhyErrors and
  OverrunErrors 8, OSM_DEFAULT_ERROR_THRESHOLD, osm_link_mgr.c), OperationalVLs 4 on
  data ports (``max_op_vls`` 5, capped by the ports' VLCap: VL0-3), HOQLife 16 on a switch
  port towards a CA and 18 between switches (``leaf_head_of_queue_lifetime`` 0x10,
  ``head_of_queue_lifetime`` 0x12); partition enforcement off between switches
  (osm_pkey_mgr.c enforces on CA-facing switch ports only);
- every switch's LifeTime 18 (``packet_life_time``), and its linear forwarding table
  from :mod:`.updown` (OpenSM's min-hop choice of ports), LinearFdbTop the highest LID;
- no multicast forwarding: OpenSM writes a switch's MFT only for the groups members
  joined through its SA (none yet on a fabric just up).

The SM itself is a stand-in at one port (:class:`SmStandIn`): IsSM in the port's
CapabilityMask and SMInfo answered MASTER, until a real subnet manager attaches anywhere
on the fabric; then it leaves (IsSM cleared, SMInfo no longer answered) so that the real
one, finding no master, becomes master and takes over the subnet as it finds it
(opensm/osm_sminfo_rcv.c: a DISCOVERING SM that finds a MASTER goes STANDBY instead).
"""

from __future__ import annotations

from ...ib.caps import CAP_IS_SM
from ...ib.enums import PortState
from ...ib.mad.consts import STATUS_METHOD_ATTR_UNSUPPORTED, Method
from ...ib.mad.layouts import SM_INFO
from . import portinfo, updown
from .state import SimFabric, SimPort

SUBNET_TIMEOUT = 18
ERROR_THRESHOLD = 8
OP_VLS = 4  # VL0-3: OpenSM's max_op_vls 5 limited by the ports' VLCap
HOQ_TO_CA, HOQ_BETWEEN_SWITCHES = 16, 18
SWITCH_LIFETIME = 18
SM_STATE_MASTER = 3  # SMInfo SMState (IBA Vol. 1, 14.2.5.13)
SM_PRIORITY = 0  # OpenSM's sm_priority default


def configure(sim: SimFabric, sm_port: SimPort) -> None:
    """Bring ``sim`` to the state a subnet manager at ``sm_port`` leaves it in (see the
    module).  Ports whose link is not up stay as they are."""
    sm_lid = sm_port.lid
    active = PortState.ACTIVE
    # The values a Set would write, straight into each port's row of the flat state
    # (portinfo.STORED's columns): through the ports' properties, a tenth of the
    # 32,768-HCA fabric's start would go here.
    sv, width = sim.flat.setv, len(portinfo.STORED)
    smlid, smsl, timeout, mkey, lease, protect, phy_err, overrun, op_vls, hoq, enf_in, enf_out = (
        portinfo.STORED.index(name)
        for name in (
            "smlid",
            "smsl",
            "subnet_timeout",
            "mkey",
            "mkey_lease",
            "mkey_protect",
            "local_phy_err",
            "overrun_err",
            "op_vls",
            "hoq_life",
            "part_enf_in",
            "part_enf_out",
        )
    )
    for node in sim.nodes:
        switch = node.is_switch
        for p in node.ports:
            if p is None:
                continue
            b = p._r * width
            if p.is_endport:
                p.lmc = 0
                sv[b + smlid], sv[b + smsl] = sm_lid, 0
                sv[b + timeout] = SUBNET_TIMEOUT
                sv[b + mkey] = sv[b + lease] = sv[b + protect] = 0
            elif p.peer is None:
                continue  # a switch port with no cable: nothing an SM sets there
            q = p.peer
            if p.num != 0 and (q is None or not p.up or not q.up):
                p.pi = None
                continue
            sv[b + phy_err] = sv[b + overrun] = ERROR_THRESHOLD
            if p.num != 0:
                p.state = active
                sv[b + op_vls] = OP_VLS
                if switch:
                    to_switch = q is not None and q.node.is_switch
                    sv[b + hoq] = HOQ_BETWEEN_SWITCHES if to_switch else HOQ_TO_CA
                    if to_switch:
                        sv[b + enf_in] = sv[b + enf_out] = 0
            p.pi = None  # encoded anew when read (the routes: the bump below, for all)
    for ni, (lft, top) in updown.lfts(sim).items():
        sw = sim.nodes[ni].sw
        assert sw is not None
        sw.lft = lft
        sw.lft_top = top
        sw.lifetime = SWITCH_LIFETIME
    sim.generation.bump()


class SmStandIn:
    """The master SM of a ``--routed`` fabric, at ``port``, until a real one attaches."""

    def __init__(self, port: SimPort):
        self.port = port
        self.active = True
        self.activity = 0
        port.cap_mask |= CAP_IS_SM
        port.changed()

    def answers(self, port: SimPort) -> bool:
        """Whether SMInfo at ``port`` is the stand-in's to answer."""
        return self.active and port is self.port

    def sm_info(self, port: SimPort, method: int, mod: int, data: bytes) -> tuple[int, bytes]:
        """SMInfo Get answered as OpenSM's master answers it (an SMA handler's shape):
        its port GUID, SM_Key 0 (kept from a requester that does not give it, IBA Vol.
        1, 14.4.1), its activity count, priority and state MASTER."""
        if method != Method.GET:
            return STATUS_METHOD_ATTR_UNSUPPORTED, data
        self.activity = (self.activity + 1) & 0xFFFF_FFFF
        return 0, SM_INFO.pack(
            {
                "SmInfoGuid": self.port.guid,
                "SmInfoKey": 0,
                "SmActivity": self.activity,
                "SmPriority": SM_PRIORITY,
                "SmState": SM_STATE_MASTER,
            }
        )

    def leave(self, for_port: SimPort) -> bool:
        """A real subnet manager attached at ``for_port``: stop answering.  True when the
        stand-in's port loses IsSM (the real one is elsewhere)."""
        if not self.active:
            return False
        self.active = False
        return for_port is not self.port
