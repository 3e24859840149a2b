"""The Performance Management Agent of every node (IBA Vol. 1, 16.1): ClassPortInfo,
PortCounters, PortCountersExtended and the error-detail attributes.

PortSelect names the port (any port of a switch; a CA's own port); 0xFF on a switch
whose PMA advertises AllPortSelect sums every port.  A Set resets the counters its
CounterSelect bits name and answers with the values after the reset.
"""

from __future__ import annotations

from ...ib.caps import PM2_ADDL_PORT_COUNTERS_EXT, PM_ALL_PORT_SELECT
from ...ib.mad.consts import (
    STATUS_INVALID_FIELD,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    STATUS_OK,
    Attr,
    Method,
)
from ...ib.mad.counters import PORT_COUNTERS_EXT_BASIC, RCV_ERROR_DETAILS, XMIT_DISCARD_DETAILS
from ...ib.mad.layouts import (
    CLASS_PORT_INFO,
    GMP_DATA_SIZE,
    PORT_COUNTERS,
    PORT_COUNTERS_EXT,
    PORT_RCV_ERROR_DETAILS,
    PORT_XMIT_DISCARD_DETAILS,
)
from .counters import summed
from .state import SimPort

ALL_PORTS = 0xFF


def _pad(raw: bytes) -> bytes:
    return raw + bytes(GMP_DATA_SIZE - len(raw))


class Pma:
    """Dispatch of PMA requests (Get and Set) to attribute handlers."""

    def __init__(self) -> None:
        # attribute id -> handler(port, method, modifier, data), for Get and Set only
        self.handlers = {
            int(Attr.CLASS_PORT_INFO): self.class_port_info,
            int(Attr.PORT_COUNTERS): self.port_counters,
            int(Attr.PORT_COUNTERS_EXT): self.port_counters_ext,
            int(Attr.PORT_RCV_ERROR_DETAILS): self.rcv_error_details,
            int(Attr.PORT_XMIT_DISCARD_DETAILS): self.xmit_discard_details,
        }

    # ---------------------------------------------------------------------------------

    def class_port_info(self, port: SimPort, method: int, mod: int, data: bytes):
        """ClassPortInfo (read-only): the PMA's capabilities."""
        caps = port.node.caps
        cpi = _pad(
            CLASS_PORT_INFO.pack(
                {
                    "BaseVersion": 1,
                    "ClassVersion": 1,
                    "CapabilityMask": caps.pma_cap_mask,
                    "CapabilityMask2": caps.pma_cap_mask2,
                    "RespTimeVal": 18,
                }
            )
        )
        return (STATUS_OK if method == Method.GET else STATUS_METHOD_ATTR_UNSUPPORTED), cpi

    def _ports(self, port: SimPort, select: int) -> list[SimPort] | None:
        """The ports a PortSelect names, or None when it names none."""
        node = port.node
        if node.is_switch:
            if select == ALL_PORTS and node.caps.pma_cap_mask & PM_ALL_PORT_SELECT:
                return [p for p in node.ports if p is not None]
            p = node.port(select)
            return [p] if p is not None else None
        if select in (port.num, 0):
            return [port]
        return None

    def port_counters(self, port: SimPort, method: int, mod: int, data: bytes):
        """PortCounters: the narrow view; a Set resets the selected counters."""
        return self._counters(port, method, data, extended=False)

    def port_counters_ext(self, port: SimPort, method: int, mod: int, data: bytes):
        """PortCountersExtended: the 64-bit view, with its own resets."""
        return self._counters(port, method, data, extended=True)

    def _counters(self, port: SimPort, method: int, data: bytes, extended: bool):
        """PortCounters or PortCountersExtended: the same counters, two views."""
        layout = PORT_COUNTERS_EXT if extended else PORT_COUNTERS
        req, ports = self._select(
            port,
            method,
            data,
            layout,
            lambda c, r: c.reset(r["CounterSelect"], r["CounterSelect2"], extended),
        )
        if ports is None:
            return STATUS_INVALID_FIELD, _pad(data[: layout.size])
        values = summed([p.flush() for p in ports], extended=extended)
        if extended and not port.node.caps.pma_cap_mask2 & PM2_ADDL_PORT_COUNTERS_EXT:
            values = {k: v for k, v in values.items() if k in PORT_COUNTERS_EXT_BASIC}
        values.update(
            PortSelect=req["PortSelect"],
            CounterSelect=req["CounterSelect"],
            CounterSelect2=req["CounterSelect2"],
        )
        return STATUS_OK, _pad(layout.pack(values))

    def _select(self, port: SimPort, method: int, data: bytes, layout, reset):
        """The request, and the ports its PortSelect names (None: it names none), with
        ``reset(counters, request)`` applied to each on a Set."""
        req = layout.unpack(data)
        ports = self._ports(port, req["PortSelect"])
        if ports is not None and method == Method.SET:
            for p in ports:
                reset(p.flush(), req)
        return req, ports

    def _details(self, port: SimPort, method: int, data: bytes, layout, names):
        req, ports = self._select(
            port, method, data, layout, lambda c, r: c.reset_details(names, r["CounterSelect"])
        )
        if ports is None:
            return STATUS_INVALID_FIELD, _pad(data[: layout.size])
        values = dict.fromkeys(names, 0)
        for p in ports:
            view = p.flush().details_view()
            for n in names:
                values[n] += view[n]
        values = {n: min(v, (1 << layout.width(n)) - 1) for n, v in values.items()}
        values.update(PortSelect=req["PortSelect"], CounterSelect=req["CounterSelect"])
        return STATUS_OK, _pad(layout.pack(values))

    def rcv_error_details(self, port: SimPort, method: int, mod: int, data: bytes):
        """PortRcvErrorDetails."""
        return self._details(port, method, data, PORT_RCV_ERROR_DETAILS, RCV_ERROR_DETAILS)

    def xmit_discard_details(self, port: SimPort, method: int, mod: int, data: bytes):
        """PortXmitDiscardDetails."""
        return self._details(port, method, data, PORT_XMIT_DISCARD_DETAILS, XMIT_DISCARD_DETAILS)
