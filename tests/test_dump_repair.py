"""A dump's addresses that InfiniBand does not allow, repaired as it is parsed: a LID outside
the unicast range is left unassigned, a node whose GUID another node owns is left out and
the switch port it hung on goes down.  In process."""

from __future__ import annotations

from fabriclab.formats import ibnetdiscover
from fabriclab.ib.enums import PhysState

DUMP = (
    "#\n"
    "# Topology file: generated on Thu Jan  1 00:00:00 1970\n"
    "#\n"
    "# Initiated from node 0000000000000001 port 0000000000000001\n"
    "\n"
    "vendid=0x2c9\n"
    "devid=0xd2f0\n"
    "sysimgguid=0x10\n"
    "switchguid=0x10(10)\n"
    'Switch\t65 "S-0000000000000010"\t\t# "sw" enhanced port 0 lid 1 lmc 0\n'
    '[1]\t"H-0000000000000001"[1](1) \t\t# "a mlx5_0" lid 60000 4xNDR\n'
    '[2]\t"H-0000000000000002"[1](1) \t\t# "b mlx5_0" lid 3 4xNDR\n'
    "\n"
    "vendid=0x2c9\n"
    "devid=0x1021\n"
    "sysimgguid=0x1\n"
    "caguid=0x1\n"
    'Ca\t1 "H-0000000000000001"\t\t# "a mlx5_0"\n'
    '[1](1) \t"S-0000000000000010"[1]\t\t# lid 60000 lmc 0 "sw" lid 1 4xNDR\n'
    "\n"
    "vendid=0x2c9\n"
    "devid=0x1021\n"
    "sysimgguid=0x2\n"
    "caguid=0x2\n"
    'Ca\t1 "H-0000000000000002"\t\t# "b mlx5_0"\n'
    '[1](1) \t"S-0000000000000010"[2]\t\t# lid 3 lmc 0 "sw" lid 1 4xNDR\n'
)


def test_bad_lid_unassigned_and_guid_thief_left_out():
    dump = ibnetdiscover.parse(DUMP, "d")
    assert [str(w) for w in dump.warnings] == [
        "d: H-0000000000000002 (b mlx5_0): port 1 GUID 0x0000000000000001 is already used by "
        "H-0000000000000001 (a mlx5_0); node left out",
        "d: H-0000000000000001 (a mlx5_0): LID 60000 (0xea60) is not a unicast LID "
        "(0x0001-0xbfff, IBA 4.1.3); left unassigned",
    ]
    f = dump.fabric
    assert [n.label for n in f.nodes] == ["S-0000000000000010", "H-0000000000000001"]
    assert 2 not in f.by_guid and "H-0000000000000002" not in f.by_label
    switch = f.by_label["S-0000000000000010"]
    kept, freed = switch.port(1), switch.port(2)
    assert kept.peer is f.by_label["H-0000000000000001"].port(1) and kept.phys == PhysState.LINKUP
    assert (freed.peer, freed.width.token, freed.speed.token, freed.phys) == (
        None,
        "4x",
        "SDR",
        PhysState.POLLING,
    )
    assert kept.peer.lid == 0
