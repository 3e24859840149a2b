"""``ibnetdiscover`` (rdma-core infiniband-diags) output, parsed into a fabric.

Parsing accepts what real dumps contain: ``ibwarn:`` lines and other noise before the
header, ``-g`` chassis grouping, ``-f`` field suffixes, ibdiagnet's variant (port
labels ``[1](1/1/1)``, fixed spaces), ibsim net files (node ids that are names), down
ports (``-p``), routers, multi-port CAs, and nodes that appear only as the far end of
a port line.  Anything it cannot read is reported with its line number and skipped.

The modules, in the order a dump goes through them: :mod:`.dump` (``parse``: which
format, then the rest), :mod:`.default_format` or :mod:`.ports_format` (the lines read
into :mod:`.records`, from the pieces in :mod:`.tokens`), :mod:`.to_fabric` (the records
made into a Fabric, addresses repaired).
"""

from __future__ import annotations

from .dump import Dump, parse, parse_file, read_file

__all__ = ["Dump", "parse", "parse_file", "read_file"]
