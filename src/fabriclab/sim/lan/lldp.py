"""LLDP on the other networks: the real ``lldpd`` in every endpoint's and switch's
namespace, announcing the spec's names (its system name the endpoint's or switch's,
its port ids the interfaces' names: ``swp3``, ``enp1s0f0np0``), so that ``lldpctl``
on a tray shows which switch port each of its interfaces is cabled to.

Each instance has its own control socket (``lldpd -u``), in a directory of the
fabric's under :data:`RUN_DIR`, named by a hash of the node so that the path stays
within a unix socket's 108 bytes; ``fabriclab exec NODE -- lldpctl`` is pointed at
it.  The instances live in the fabric's namespaces, so removing those ends them.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from pathlib import Path

from ...ethernet import SWITCH_MODELS
from ...model.networks import Networks
from .names import namespace

RUN_DIR = Path("/run/fabriclab-lldp")
TX_INTERVAL = 5  # seconds between announcements (lldpd's default is 30)
START_TIMEOUT = 10.0  # seconds for an instance's control socket to appear


def _short(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def fabric_dir(fabric: str) -> Path:
    return RUN_DIR / _short(fabric)


def socket(fabric: str, node: str) -> Path:
    """Node ``node``'s lldpd control socket."""
    return fabric_dir(fabric) / f"{_short(node)}.sock"


def start(fabric: str, nets: Networks) -> int:
    """An lldpd in every namespace of ``nets``, named as the spec names its node; how
    many were started."""
    d = fabric_dir(fabric)
    d.mkdir(parents=True, exist_ok=True)
    nodes = dict.fromkeys(nets.endpoints, "")
    nodes.update({s.name: SWITCH_MODELS[s.model].name for s in nets.switches.values()})
    for node in nodes:
        sock = socket(fabric, node)
        pid = sock.with_suffix(".pid")
        # in a UTS namespace of its own named as the node: its first announcement
        # already carries the node's name
        run = 'hostname "$0" && exec lldpd -u "$1" -p "$2"'
        argv = ["unshare", "--uts", "sh", "-c", run, node, str(sock), str(pid)]
        subprocess.run(
            ["ip", "netns", "exec", namespace(fabric, node), *argv], check=True, capture_output=True
        )
    deadline = time.monotonic() + START_TIMEOUT
    for node, descr in nodes.items():
        sock = socket(fabric, node)
        while not sock.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"lldpd for {node} did not start in {START_TIMEOUT:g} s")
            time.sleep(0.02)
        config = [
            f"configure system hostname {node}",
            "configure lldp portidsubtype ifname",
            f"configure lldp tx-interval {TX_INTERVAL}",
        ]
        if descr:
            config.append(f'configure system description "{descr}"')
        subprocess.run(
            ["lldpcli", "-u", str(sock)],
            input="\n".join(config) + "\n",
            text=True,
            check=True,
            capture_output=True,
        )
    return len(nodes)


def remove(fabric: str) -> None:
    """The fabric's sockets and pid files (its instances ended with its namespaces)."""
    shutil.rmtree(fabric_dir(fabric), ignore_errors=True)
