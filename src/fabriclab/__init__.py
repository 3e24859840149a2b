"""fabriclab: the networks of a GPU cluster (NVLink domains, an InfiniBand fabric),
emulated from a declarative spec so that cluster software can be built and tested
without the hardware."""

__version__ = "0.1.0"
