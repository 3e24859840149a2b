"""The MAD view (fabriclab.ib.mad.view) and the sim_request view (fabriclab.ib.simwire):
a request read and turned into its response in the buffer it arrived in, and a trap
built whole, checked against the layouts."""

from __future__ import annotations

from simclient import dr_smp, lid_mad

from fabriclab.ib import simwire
from fabriclab.ib.mad.consts import STATUS_INVALID_FIELD, Attr, Method, MgmtClass
from fabriclab.ib.mad.layouts import DR_SMP_HEADER, MAD_HEADER, NOTICE
from fabriclab.ib.mad.view import HEADER_FIELDS, MadView, requester, trap


def _received(mad: bytes, dlid: int = 0xFFFF, slid: int = 0, dqp: int = 0, sqp: int = 0):
    buf = bytearray(4096)
    raw = simwire.REQUEST.pack(dlid, slid, dqp, sqp, 0, 256, mad.ljust(256, b"\0"))
    buf[: len(raw)] = raw
    return buf, simwire.RequestView(buf)


def test_header_of_a_directed_route_smp():
    _buf, req = _received(dr_smp(Attr.PORT_INFO, [1, 9, 3], method=Method.SET, mod=3, tid=0xAB))
    values = dict(zip(HEADER_FIELDS, req.mad.header(), strict=False))
    assert values["BaseVersion"] == 1 and values["MgmtClass"] == MgmtClass.SMI_DIRECT
    assert (values["R"], values["Method"], values["D"]) == (0, Method.SET, 0)
    assert (values["AttributeID"], values["AttributeModifier"]) == (Attr.PORT_INFO, 3)
    assert (values["HopPointer"], values["HopCount"], values["TransactionID"]) == (0, 3, 0xAB)
    assert (values["DrSLID"], values["DrDLID"]) == (0xFFFF, 0xFFFF)
    assert list(req.mem[req.mad.initial_path][:4]) == [0, 1, 9, 3]


def test_a_directed_route_request_turned_around():
    _buf, req = _received(
        dr_smp(Attr.PORT_INFO, [1], method=Method.SET, tid=5), dlid=0xFFFF, slid=0, dqp=0, sqp=0
    )
    req.mad.note_requester(7)
    req.set_status(110)
    req.turn_around(STATUS_INVALID_FIELD, True, 0xFFFF, 0, 0, 0)
    _dlid, _slid, _dqp, _sqp, status, _, mad = simwire.REQUEST.unpack(req.whole)
    assert status == 0
    h = DR_SMP_HEADER.unpack(mad)
    assert (h["R"], h["Method"], h["D"], h["Status"]) == (1, 1, 1, STATUS_INVALID_FIELD)
    assert requester(h["TransactionID"]) == 7 and h["TransactionID"] & 0xFFFF_FFFF_FFFF == 5


def test_a_lid_routed_request_turned_around_swaps_its_addresses():
    _buf, req = _received(lid_mad(0x04, Attr.PORT_COUNTERS), dlid=104, slid=0, dqp=1, sqp=0)
    assert req.addresses() == (104, 0, 1, 0)
    req.set_slid(100)
    req.turn_around(0, False, *req.addresses())
    dlid, slid, dqp, sqp, status, _, mad = simwire.REQUEST.unpack(req.whole)
    assert (dlid, slid, dqp, sqp, status) == (100, 104, 0, 1, 0)
    h = MAD_HEADER.unpack(mad)
    assert (h["Method"] | h["R"] << 7, h["Status"]) == (Method.GET_RESPONSE, 0)


def test_data_areas():
    mad = MadView(bytearray(256))
    assert (mad.smp_data.start, mad.smp_data.stop) == (64, 128)
    assert (mad.gmp_data.start, mad.gmp_data.stop) == (64, 256)
    assert (mad.initial_path.start, mad.return_path.start) == (128, 192)


def test_trap_notice():
    mad = trap(9, 144, 104, 1, NoticeDataTrap144LID=104, NoticeDataTrap144CapMask=0x2)
    assert len(mad) == 256
    h = MAD_HEADER.unpack(mad)
    assert (h["MgmtClass"], h["Method"], h["AttributeID"], h["TransactionID"]) == (
        MgmtClass.SMI,
        Method.TRAP,
        Attr.NOTICE,
        9,
    )
    n = NOTICE.unpack(mad[64:128])
    assert (n["NoticeIsGeneric"], n["NoticeType"], n["NoticeProducerType"]) == (1, 4, 1)
    assert (n["NoticeTrapNumber"], n["NoticeIssuerLID"]) == (144, 104)
    assert (n["NoticeDataTrap144LID"], n["NoticeDataTrap144CapMask"]) == (104, 2)
    assert NOTICE.unpack(trap(1, 128, 2, 2, NoticeDataLID=2)[64:128])["NoticeType"] == 1
    assert mad[128:] == bytes(128)
