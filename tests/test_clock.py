"""The live fabric's clocks."""

import pytest

from fabriclab.sim.live.clock import VirtualClock, WallClock


def test_virtual_clock_moves_only_when_advanced():
    c = VirtualClock()
    assert c.now() == 0.0 and c.virtual
    assert c.advance(2.5) == 2.5 and c.now() == 2.5
    with pytest.raises(ValueError, match="cannot go back"):
        c.advance(-1)
    assert c.now() == 2.5


def test_wall_clock_is_monotonic_from_zero():
    c = WallClock()
    a, b = c.now(), c.now()
    assert 0 <= a <= b < 5 and not c.virtual
