"""Which MAD core serves: the native one (C, :mod:`._madcore`, built from ``madcore/``)
or the Python reference path alone, by ``FABRICLAB_MAD_CORE`` (``native``, the default,
or ``python``), read once when a server starts; and how long the native loop polls
after the last thing it found before it sleeps, ``FABRICLAB_MAD_SPIN_US`` (microseconds,
0 to 10,000; default 50; 0: it sleeps at once).

The native core answers the common SMP Gets (NodeInfo, NodeDescription, PortInfo,
SwitchInfo, LinearForwardingTable and P_Key blocks) from the fabric's flat state
(:mod:`..fabric.flat`), routing and counting them as :mod:`..fabric.router` does; it
hands every other datagram back untouched to :class:`.dispatch.Dispatch`, which
handles it as it always has.
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Callable

from ...ib.mad.layouts import PORT_INFO
from ...ib.simwire import REQUEST_SIZE
from ..fabric import portinfo
from ..fabric.state import SimFabric
from .client import Client
from .transport import MADS_PER_WAKEUP, Transport

log = logging.getLogger("fabriclab.sim")

ENV = "FABRICLAB_MAD_CORE"
CORES = ("native", "python")
SPIN_ENV = "FABRICLAB_MAD_SPIN_US"
# Long enough to cover a tool's turn-around between an answer and its next MAD
# (ibnetdiscover through libumad2sim: 10-30 us here; docs/benchmarks.md, "Polling before
# sleeping"), short enough to cost nothing worth having once a burst ends.
SPIN_US = 50
SPIN_US_MAX = 10_000  # madcore.h's SPIN_US_MAX


def wanted() -> str:
    """The core ``FABRICLAB_MAD_CORE`` asks for (unset: native)."""
    value = os.environ.get(ENV, "").strip().lower() or "native"
    if value not in CORES:
        log.warning("%s=%s is neither native nor python: the native core serves", ENV, value)
        return "native"
    return value


def spin_us() -> int:
    """How long the native loop polls before it sleeps (``FABRICLAB_MAD_SPIN_US``)."""
    value = os.environ.get(SPIN_ENV, "").strip()
    if not value:
        return SPIN_US
    try:
        us = int(value)
    except ValueError:
        us = -1
    if not 0 <= us <= SPIN_US_MAX:
        log.warning(
            "%s=%s is not a whole number of microseconds from 0 to %d: %d serves",
            SPIN_ENV,
            value,
            SPIN_US_MAX,
            SPIN_US,
        )
        return SPIN_US
    return us


def chosen() -> str:
    """The core a server started now serves with: the one asked for, if it is there, and
    the Python path while every MAD is traced (``-vv``)."""
    if wanted() == "python" or log.isEnabledFor(logging.DEBUG):
        return "python"
    try:
        from . import _madcore  # type: ignore[attr-defined]  # noqa: F401
    except ImportError as e:
        log.warning("the native MAD core is not built (%s): the Python core serves", e)
        return "python"
    return "native"


def _local_port_at() -> int:
    """PortInfo's LocalPortNum byte (an 8-bit field on a byte boundary)."""
    bit, width = next((off, w) for name, off, w in PORT_INFO.fields if name == "LocalPort")
    assert width == 8 and bit % 8 == 0
    return bit // 8


def make_core(
    sim: SimFabric,
    buf: bytearray,
    stats,
    drops: dict,
    sma_attrs,
    on_set: Callable[[int], None],
    on_lft: Callable[[int], None],
):
    """The native core over ``sim``'s flat state and the receive buffer ``buf``, counting
    in ``stats`` and leaving MADs to Python while ``drops`` has a port; it routes the
    directed-route Gets and Sets of ``sma_attrs`` (the attributes the SMA has) it does
    not answer itself for the Python SMA, and carries out the PortInfo Sets that change
    nothing but the port's values (calling ``on_set`` with the port's row after each) and
    the LinearForwardingTable Sets (``on_lft`` with the switch's node index).
    None when the reference path is asked for or the core is not built."""
    if chosen() == "python":
        return None
    from . import _madcore  # type: ignore[attr-defined]

    sma = bytearray(1 << 16)
    for attr in sma_attrs:
        sma[attr] = 1
    core = _madcore.Core(sim.flat, buf, stats, drops, _local_port_at(), bytes(sma))
    table, facts = set_rules()
    objs = sim.flat.objs

    def encode_pi(row: int) -> None:  # the core needs a port's PortInfo not encoded yet
        objs[row].port_info()

    core.set_rules(table, facts, sim.flat.setv, len(portinfo.STORED), on_set, on_lft, encode_pi)
    return core


def _bits(field: str) -> tuple[int, int]:
    return next((off, width) for name, off, width in PORT_INFO.fields if name == field)


# where a settable component's value is kept, when not in a column of the flat state's setv
# (madcore.h's COL_*)
_COLUMNS = {"lid": -1, "lmc": -2, "state": -3, "phys": -3}


def set_rules() -> tuple[array, array]:
    """The PortInfo Set's rules for the native core (``Core.set_rules``), made from
    :data:`.portinfo.SETTABLE`: a row of 8 each (bit offset, width, rule, where its
    value is kept, the rule's arguments), and the facts a Set is checked by (LinkState,
    PortPhysicalState, NeighborMTU and OperVLs as written, MtuCap and VLCap as encoded)."""
    field_of = {c.attr: c.field for c in portinfo.COMPONENTS if c.attr is not None}
    rows: list[int] = []
    for c in portinfo.SETTABLE:
        rule = c.set.rule  # type: ignore[union-attr]
        kind, args = rule[0], rule[1:]
        attr = str(c.attr)
        col = _COLUMNS[attr] if attr in _COLUMNS else portinfo.STORED.index(attr)
        a4, sup = 0, (-1, 0)
        if kind == portinfo.RULE_ENABLED:
            a4 = args[0]
            sup = _bits(field_of[args[1]]) if args[1] else (-1, 0)
        elif kind == portinfo.RULE_WIDTH:
            sup = _bits(field_of[args[0]])
        elif kind == portinfo.RULE_EXTERNAL:
            a4 = args[0]
        rows += [*_bits(c.field), kind, col, a4, *sup, 0]
    facts = [
        *_bits("LinkState"),
        *_bits("PhysLinkState"),
        *_bits("NeighborMTU"),
        *_bits("OperVLs"),
        *_bits("MtuCap"),
        *_bits("VLCap"),
    ]
    return array("q", rows), array("q", facts)


def pump(
    core,
    transport: Transport,
    python: Callable[[Client, int], None],
    sma: Callable[[Client, int], None],
    cl: Client,
) -> None:
    """:meth:`.transport.Transport.receive` through the native ``core``: it receives,
    answers and sends what it can of ``cl``'s waiting datagrams; what it leaves in the
    buffer goes to ``python`` (the Python path), or routed to a port row, to ``sma``
    (the Python SMA's handler)."""
    step, fd, row, cid = core.pump, cl.sock.fileno(), cl.port._r, cl.id
    for _ in range(MADS_PER_WAKEUP):
        try:
            n = step(fd, row, cid, MADS_PER_WAKEUP)
        except Exception:  # the core failed on a datagram (a bug): it costs that MAD
            transport.on_mad_error(cl, REQUEST_SIZE)
            continue
        if n == -1 or n == -3:  # nothing left waiting; or a wake-up's worth answered
            return
        if not settle(transport, python, sma, cl, n):
            return


def settle(
    transport: Transport,
    python: Callable[[Client, int], None],
    sma: Callable[[Client, int], None],
    cl: Client,
    n: int,
) -> bool:
    """What the core left of a datagram of ``cl`` (its code ``n``, the datagram in the
    buffer): sent, answered by the SMA or by the Python path; whether ``cl`` is still
    there to read from."""
    if n == -2:  # answered, not sent: sent again with the error handling
        transport.send(cl, memoryview(transport.buf)[:REQUEST_SIZE])
        return transport.clients.get(cl.id) is cl
    if n <= -16:  # routed: the SMA answers it
        try:
            sma(cl, -16 - n)
        except Exception:  # a bug must cost one MAD, not the fabric
            transport.on_mad_error(cl, REQUEST_SIZE)
        return True
    if n == -4:  # the receive failed: once more, to see why
        try:
            n = cl.sock.recv_into(transport.buf)
        except BlockingIOError:
            return False
        except OSError as e:
            transport.detach(cl, f"receive failed: {e}")
            return False
    try:
        python(cl, n)
    except Exception:  # a bug must cost one MAD, not the fabric
        transport.on_mad_error(cl, n)
    return transport.clients.get(cl.id) is cl


class Loop:
    """The server loop's wait through the native core (:meth:`Transport.serve_forever`
    calls :meth:`poll` as it would ``epoll.poll``): the clients on plain sockets are
    served in C between the loop's turns, one datagram per ready client per round, and
    the loop sees only what needs Python."""

    def __init__(
        self,
        core,
        transport: Transport,
        python: Callable[[Client, int], None],
        sma: Callable[[Client, int], None],
    ):
        self.core, self.transport, self.python, self.sma = core, transport, python, sma
        self._serve = core.serve
        self.spin_us = spin_us()

    def watch(self, fd: int, cl: Client) -> None:
        """Serve ``cl``'s datagrams, on descriptor ``fd``, natively."""
        self.core.watch(fd, cl.port._r, cl.id)

    def unwatch(self, fd: int) -> None:
        self.core.watch(fd, -1, 0)

    def poll(self, epoll_fd: int, timeout: float) -> list[tuple[int, int]]:
        """Wait up to ``timeout`` seconds; the events for Python's loop."""
        ms = -1 if timeout < 0 else int(timeout * 1000 + 0.999)
        pending, events = self._serve(epoll_fd, ms, self.spin_us)
        if pending is not None:
            fd, code = pending
            cl = self.transport.client_at(fd)
            if cl is not None:
                settle(self.transport, self.python, self.sma, cl, code)
        return events
