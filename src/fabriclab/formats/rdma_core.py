"""Which rdma-core release's output the renderers follow: the releases told apart here
(44, Debian 12; 56, Debian 13) and the one installed on this machine.

The one difference in what fabriclab renders: an XDR link.  XDR is carried in PortInfo's
LinkSpeedExtActive2 (IBA 1.7), with LinkSpeedExtActive 0 and LinkSpeedActive 4 (QDR).
rdma-core 56's ibnetdiscover reads LinkSpeedExtActive2 and prints "4xXDR" ("4x XDR"
with -p); rdma-core 44 predates that field, finds no extended speed and falls back to
LinkSpeedActive, printing "4xQDR" ("4x QDR").  Both observed with Debian's
infiniband-diags 44.0-2 and 56.1-1 against the same XDR fabric; every other line of
ibnetdiscover's default and -p output was identical between them.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from ..ib.rates import SPEEDS, Speed

RELEASES = (44, 56)
LATEST = RELEASES[-1]
# rdma-core's ibnetdiscover reads LinkSpeedExtActive2 from this release on (of RELEASES)
_READS_EXT2 = 56


def installed() -> int | None:
    """The installed rdma-core's major version, from Debian's infiniband-diags package
    (built from the rdma-core source, so versioned alike); None when unknown."""
    if shutil.which("dpkg-query") is None:
        return None
    try:
        r = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Status} ${Version}", "infiniband-diags"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"install ok installed (?:\d+:)?(\d+)\.", r.stdout)
    return int(m.group(1)) if m else None


def release(version: int | None = None) -> int:
    """The release of RELEASES whose output ``version`` prints: the newest at or below
    it (the oldest for anything older).  None: the installed rdma-core's, or LATEST when
    none is installed."""
    if version is None:
        version = installed() or LATEST
    return max((r for r in RELEASES if r <= version), default=RELEASES[0])


def speed_shown(speed: Speed, version: int) -> Speed:
    """The speed rdma-core ``version``'s ibnetdiscover names for a link at ``speed``."""
    if release(version) < _READS_EXT2 and speed.ext2 and not speed.ext:
        # no extended speed seen: LinkSpeedActive's SDR/DDR/QDR
        return next(
            s
            for s in SPEEDS.values()
            if s.speed == speed.speed and not (s.ext or s.ext2 or s.fdr10)
        )
    return speed
