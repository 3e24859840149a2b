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
import json
import shutil
import subprocess
import time
from pathlib import Path

from ...errors import FabriclabError
from ...ethernet import SWITCH_MODELS
from ...model.networks import Networks
from .names import namespace

RUN_DIR = Path("/run/fabriclab-lldp")
TX_INTERVAL = 5  # seconds between announcements (lldpd's default is 30)
START_TIMEOUT = 10.0  # seconds for an instance to start (or answer)
START_BATCH = 32  # instances started (or asked) at once


def _short(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def fabric_dir(fabric: str) -> Path:
    return RUN_DIR / _short(fabric)


def socket(fabric: str, node: str) -> Path:
    """Node ``node``'s lldpd control socket."""
    return fabric_dir(fabric) / f"{_short(node)}.sock"


def start(fabric: str, nets: Networks) -> int:
    """An lldpd in every namespace of ``nets``, named as the spec names its node and
    configured before its first announcement (by its own configuration file, ``lldpd
    -O``, applied before it resumes); how many were started.  They start side by side,
    at most :data:`START_BATCH` at once.

    The system name is configured, not left to lldpd: unconfigured, lldpd looks the
    host's name up in DNS for a fully qualified one, and from a namespace whose default
    route leads to a gateway that routes nowhere each lookup waits out the resolver's
    timeouts, while its requests fill the machine-wide neighbour table."""
    d = fabric_dir(fabric)
    d.mkdir(parents=True, exist_ok=True)
    nodes = dict.fromkeys(nets.endpoints, "")
    nodes.update({s.name: SWITCH_MODELS[s.model].name for s in nets.switches.values()})
    cmds = {}
    for node, descr in nodes.items():
        sock = socket(fabric, node)
        conf = sock.with_suffix(".conf")
        conf.write_text(
            f"configure system hostname {node}\n"
            "configure lldp portidsubtype ifname\n"
            f"configure lldp tx-interval {TX_INTERVAL}\n"
        )
        argv = ["-u", str(sock), "-p", str(sock.with_suffix(".pid")), "-O", str(conf)]
        argv += ["-S", descr] if descr else []
        # lldpd daemonizes once its socket is bound: each start returns when it is ready
        cmds[node] = ["ip", "netns", "exec", namespace(fabric, node), "lldpd", *argv]
    for node, (code, _, err) in _batched(cmds).items():
        if code is None:
            raise FabriclabError(f"did not start in {START_TIMEOUT:g} s", f"lldpd of {node}")
        if code:
            last = (err.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
            raise FabriclabError(f"did not start: {last}", f"lldpd of {node}")
    return len(nodes)


def neighbours(fabric: str, nodes: list[str]) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The cables the lldpd of each of ``nodes`` sees: (its interface, the neighbour's
    system name and port id), each as (node, interface); a node whose lldpd does not
    answer sees none."""
    found = []
    cmds = {node: ["lldpctl", "-u", str(socket(fabric, node)), "-f", "json0"] for node in nodes}
    for node, (code, out, _) in _batched(cmds).items():
        if code == 0:
            found += [((node, i), far) for i, far in _parse(out)]
    return found


def _batched(cmds: dict[str, list[str]]) -> dict[str, tuple[int | None, bytes, bytes]]:
    """Run each command (by its node), :data:`START_BATCH` at a time: each one's exit
    status (None: it did not end within :data:`START_TIMEOUT` and was killed), output
    and error output."""
    done: dict[str, tuple[int | None, bytes, bytes]] = {}
    todo = list(cmds.items())
    while todo:
        batch, todo = todo[:START_BATCH], todo[START_BATCH:]
        procs = [
            (node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            for node, cmd in batch
        ]
        for node, proc in procs:
            try:
                out, err = proc.communicate(timeout=START_TIMEOUT)
                done[node] = (proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                done[node] = (None, b"", b"")
    return done


def cabling(
    fabric: str, nets: Networks, wait: float
) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The cables LLDP shows on ``fabric``'s networks, asked until every cabled end sees
    a neighbour or ``wait`` seconds have passed (a cable down never will)."""
    cabled = {end for link in nets.links for end in link}
    nodes = [*nets.endpoints, *nets.switches]
    deadline = time.monotonic() + wait
    while True:
        found = neighbours(fabric, nodes)
        if cabled <= {near for near, _ in found} or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


def _parse(out: bytes) -> list[tuple[str, tuple[str, str]]]:
    """lldpctl's ``-f json0`` (every element a list) as (interface, (system name, port
    id)) per neighbour."""
    try:
        doc = json.loads(out)
    except ValueError:
        return []
    pairs = []
    for lldp in doc.get("lldp") or []:
        for iface in lldp.get("interface") or []:
            for chassis in iface.get("chassis") or [{}]:
                names = [n.get("value") for n in chassis.get("name") or []]
                for port in iface.get("port") or []:
                    ids = [i.get("value") for i in port.get("id") or []]
                    if names and ids and names[0] and ids[0]:
                        pairs.append((iface.get("name"), (names[0], ids[0])))
    return pairs


def remove(fabric: str) -> None:
    """The fabric's sockets and pid files (its instances ended with its namespaces)."""
    shutil.rmtree(fabric_dir(fabric), ignore_errors=True)
