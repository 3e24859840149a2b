"""The other networks of ``gb200-su`` built in Linux: ``fabriclab up gb200-su --networks``
(144 trays, their 144 BMCs, 72 NVLink switch trays, 4 service nodes and 19 Ethernet
switches: 383 namespaces, 522 veth pairs, an lldpd in each namespace) timed to every
namespace answering: the controller pings every tray over the front end and every BMC
and NVLink switch tray over out-of-band management, a storage node every tray over the
storage network.  Printed: the time of ``up``, of the first full round of pings, the
memory the machine gave up (MemAvailable before and after, so the namespaces', veths'
and lldpds' kernel and user memory together), the processes, and the time of
``down``.  Root.

    python bench/networks.py [--spec gb200-su]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def mem_available_kb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def fl(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", *args], env=env, capture_output=True, text=True
    )


def unanswered(ns: str, addresses: list[str]) -> list[str]:
    """The addresses of ``addresses`` that do not answer one ping from namespace ``ns``."""
    script = 'for a in "$@"; do ping -c1 -W1 "$a" >/dev/null 2>&1 || echo "$a"; done'
    r = subprocess.run(
        ["ip", "netns", "exec", ns, "sh", "-c", script, "sh", *addresses],
        capture_output=True,
        text=True,
    )
    return r.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default="gb200-su")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/networks.py: root is needed to build network namespaces")
    name = f"netbench{os.getpid()}"
    env = dict(os.environ, FABRICLAB_STATE_DIR=tempfile.mkdtemp(prefix="fl-netbench-"))
    doc = json.loads(fl("networks", a.spec, "--json", env=env).stdout)
    by = {
        (e["name"], i["network"]): i["address"].split("/")[0]
        for e in doc["endpoints"]
        if e["kind"] != "switch"
        for i in e["interfaces"]
    }
    kinds = {e["name"]: e["kind"] for e in doc["endpoints"]}
    ctl = next(n for n, k in kinds.items() if k == "service" and (n, "oob") in by)
    stor = next(n for (n, net) in by if net == "storage" and kinds[n] == "service")
    fe = [v for (n, net), v in by.items() if net == "frontend" and kinds[n] == "tray"]
    oob = [v for (n, net), v in by.items() if net == "oob" and kinds[n] in ("bmc", "nvswitch")]
    switch_trays = sum(1 for k in kinds.values() if k == "nvswitch")
    st = [v for (n, net), v in by.items() if net == "storage" and kinds[n] == "tray"]
    before = mem_available_kb()
    t0 = time.perf_counter()
    r = fl("up", a.spec, "--name", name, "--detach", "--routed", "--networks", env=env)
    t_up = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"up failed: {r.stderr}")
    try:
        missing = ["?"]
        rounds = 0
        while missing and rounds < 5:
            rounds += 1
            missing = unanswered(f"fl.{name}.{ctl}", fe + oob) + unanswered(f"fl.{name}.{stor}", st)
        t_ping = time.perf_counter() - t0
        used = (before - mem_available_kb()) / 1024
        spaces = [
            n
            for n in subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True
            ).stdout.split()
            if n.startswith(f"fl.{name}.")
        ]
        lldpds = subprocess.run(
            ["pgrep", "-c", "lldpd"], capture_output=True, text=True
        ).stdout.strip()
        print(
            f"{a.spec} --networks: up {t_up:.1f} s; every namespace answering at {t_ping:.1f} s "
            f"({len(fe)} trays over the front end, {len(oob) - switch_trays} BMCs and "
            f"{switch_trays} NVLink switch trays over out-of-band management, "
            f"{len(st)} trays over storage; {rounds} round(s), {len(missing)} unanswered"
            f"{': ' + ' '.join(missing[:5]) if missing else ''}); "
            f"{len(spaces)} namespaces, {lldpds} lldpd processes; memory given up "
            f"{used:.0f} MB (MemAvailable)"
        )
    finally:
        t1 = time.perf_counter()
        fl("down", "--name", name, env=env)
        t_down = time.perf_counter() - t1
        left = [
            n
            for n in subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True
            ).stdout.split()
            if n.startswith(f"fl.{name}.")
        ]
        print(f"down {t_down:.1f} s; {len(left)} namespaces left")


if __name__ == "__main__":
    main()
