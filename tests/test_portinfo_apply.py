"""PortInfo's Set as generated straight-line code (portinfo.apply) does what each
component's own rule does, on every kind of port, for random values."""

from __future__ import annotations

import random

from fabriclab.model.build import build
from fabriclab.sim.fabric import portinfo
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.spec.load import load_spec

LAB = build(load_spec("lab"))


def _ports(sim: SimFabric):
    return [p for n in sim.nodes for p in n.ports if p is not None]


def test_generated_apply_is_the_rules():
    a, b = SimFabric(LAB.fabric), SimFabric(LAB.fabric)
    rng = random.Random(22)
    width = {name: w for name, _, w in portinfo.PORT_INFO.fields}
    for _ in range(20):
        for pa, pb in zip(_ports(a), _ports(b), strict=True):
            values = tuple(  # what a Set's field can hold
                rng.choice([0, 1, 2, 7, 15, 31, 0xFF, rng.randrange(1 << 16)])
                & ((1 << width[c.field]) - 1)
                for c in portinfo.SETTABLE
            )
            portinfo.apply(pa, values)
            for c, v in zip(portinfo.SETTABLE, values, strict=True):
                c.set(pb, v)  # type: ignore[misc]
            assert portinfo.encode(pa) == portinfo.encode(pb)
