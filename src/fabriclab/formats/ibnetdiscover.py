"""``ibnetdiscover`` (rdma-core infiniband-diags): its output rendered from a fabric
(:mod:`.ibnetdiscover_render`) and real dumps parsed back (:mod:`.ibnetdiscover_parse`)."""

from __future__ import annotations

from .ibnetdiscover_parse import Dump, parse, parse_file, read_file
from .ibnetdiscover_render import header, render, render_ports

__all__ = ["Dump", "header", "parse", "parse_file", "read_file", "render", "render_ports"]
