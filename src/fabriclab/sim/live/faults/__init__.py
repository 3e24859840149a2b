"""Faults on a running fabric: ``book`` (the faults in force, applied and cleared),
``options`` (each kind's options checked), ``targets`` (what a fault's TARGET names),
``ports`` (what a fault does to a port), ``timeline`` (flaps and bit errors as the clock
moves), ``ber`` (the bit-error model)."""
