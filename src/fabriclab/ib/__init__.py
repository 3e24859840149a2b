"""InfiniBand facts, once: rates and widths, states and node types, capability bits, the
device catalog, identifiers and their ranges, the MAD layouts and their codec, and the
records of the simulator wire protocol.  Every other package builds on this one; it
imports nothing else of fabriclab."""
