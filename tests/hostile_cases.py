"""Hostile but realistic inputs for every input path, and a runner that measures each as a
real ``python -m fabriclab.cli`` child: wall time, peak RSS (from ``os.wait4``), exit
status and stderr, under an address-space limit so that a regression cannot take the
machine down.  Used by tests/test_hostile_inputs.py and bench/hostile.py.

Each case writes its files into a fresh directory, runs there, and says what the user
must see: ``error`` (exit 2, ``error:`` lines only, by default exactly one), ``warn``
(exit 1, ``warning:`` lines, output produced) or ``ok`` (exit 0).
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SHOWN = 20  # problems printed before "… N more" (fabriclab.errors.SHOWN)

# --- inputs ----------------------------------------------------------------------------

TINY_SPEC = """\
name: tiny
trays:
  - hosts: n[1-2]
    hcas: 1
fabric:
  fat_tree: {tiers: 1, hosts_per_leaf: 2, names: {leaf: "L1"}}
"""

# `fabriclab render TINY_SPEC ibnetdiscover` (SOURCE_DATE_EPOCH=1733000000)
TINY_DUMP = """\
#
# Topology file: generated on Sat Nov 30 20:53:20 2024
#
# Initiated from node e09d7303667590e1 port e09d7303667590e1

vendid=0x2c9
devid=0xd2f2
sysimgguid=0x2c5eab0352b1773e
switchguid=0x2c5eab0352b1773e(2c5eab0352b1773e)
Switch\t65 "S-2c5eab0352b1773e"\t\t# "MF0;L1:MQM9701/U1" enhanced port 0 lid 1 lmc 0
[1]\t"H-e09d7303667590e1"[1](e09d7303667590e1) \t\t# "n1 mlx5_0" lid 100 4xNDR
[2]\t"H-e09d730305ab5c45"[1](e09d730305ab5c45) \t\t# "n2 mlx5_0" lid 101 4xNDR

vendid=0x2c9
devid=0x1021
sysimgguid=0xe09d730305ab5c45
caguid=0xe09d730305ab5c45
Ca\t1 "H-e09d730305ab5c45"\t\t# "n2 mlx5_0"
[1](e09d730305ab5c45) \t"S-2c5eab0352b1773e"[2]\t\t# lid 101 lmc 0 "MF0;L1:MQM9701/U1" lid 1 4xNDR

vendid=0x2c9
devid=0x1021
sysimgguid=0xe09d7303667590e1
caguid=0xe09d7303667590e1
Ca\t1 "H-e09d7303667590e1"\t\t# "n1 mlx5_0"
[1](e09d7303667590e1) \t"S-2c5eab0352b1773e"[1]\t\t# lid 100 lmc 0 "MF0;L1:MQM9701/U1" lid 1 4xNDR
"""

PORTS_LINE = (
    "CA   100  1 0xe09d7303667590e1 4x NDR - SW     1  1 0x2c5eab0352b1773e "
    "( 'n1 mlx5_0' - 'MF0;L1:MQM9701/U1' )\n"
)


def spec(body: str, fabric: str = "fabric: {fat_tree: {}}\n") -> bytes:
    return (body + fabric).encode()


def explicit(switches: str = "", cas: str = "", links: str = "", trays: str = "") -> bytes:
    text = trays + "fabric:\n  explicit:\n"
    text += f"    switches: {switches or '[]'}\n"
    if cas:
        text += f"    cas: {cas}\n"
    if links:
        text += f"    links: {links}\n"
    return text.encode()


def alias_bomb() -> bytes:
    """ "Billion laughs": nine levels of nine aliases, 1 KB of text, 9**9 strings."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return ("\n".join(lines) + "\nfabric: {fat_tree: {}}\n").encode()


def random_bytes(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def garbage_dump(size: int) -> bytes:
    """Printable garbage in lines of up to 200 bytes, deterministic."""
    rng = random.Random(7)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 []()#=\"'-\t"
    out = bytearray()
    while len(out) < size:
        n = rng.randint(1, 200)
        out += bytes(rng.choice(alphabet) for _ in range(20)) * (n // 20 + 1)
        out += b"\n"
    return bytes(out[:size])


def nodes_file(n: int) -> bytes:
    return "".join(f"cpu-{i:06d}\n" for i in range(n)).encode()


def million_keys() -> bytes:
    return ("fabric: {fat_tree: {}}\n" + "".join(f"k{i}: 1\n" for i in range(1_000_000))).encode()


def many_keys(n: int) -> bytes:
    return ("fabric: {fat_tree: {}}\n" + "".join(f"k{i}: 1\n" for i in range(n))).encode()


def many_cas(n: int, ports: int) -> bytes:
    cas = "".join(f"\n      - {{name: c{i}, desc: 'c{i} HCA-1', ports: {ports}}}" for i in range(n))
    return f"fabric:\n  explicit:\n    switches: []\n    cas:{cas}\n".encode()


def unreadable_dir(d: Path) -> None:
    (d / "locked").mkdir()
    (d / "locked" / "spec.yaml").write_text(TINY_SPEC)
    (d / "locked").chmod(0)


def fifo(name: str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        os.mkfifo(d / name)

    return make


def sparse(name: str, size: int) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        with open(d / name, "wb") as f:
            f.truncate(size)

    return make


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    want: str  # "error" | "warn" | "ok"
    contains: str = ""  # in stderr
    files: dict[str, bytes | Callable[[], bytes]] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    lines: int | None = None  # most stderr lines allowed (default: 1 for error, SHOWN+1 warn)
    drop_dac: bool = False  # permission cases: as root, run without the right to ignore file modes
    validate_output: str | None = None  # a spec the command wrote: `validate` must accept it
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""

    def write(self, d: Path) -> None:
        for name, content in self.files.items():
            data = content() if callable(content) else content
            (d / name).write_bytes(data)
        if self.setup:
            self.setup(d)


def _dump(body: str) -> dict:
    return {"dump.txt": body.encode()}


IMPORT = ("import", "dump.txt", "-o", "out.yaml")

CASES: list[Case] = [
    # --- A: memory blowups from small inputs ---------------------------------------
    Case("yaml-alias-bomb", ("validate", "s.yaml"), "error", "alias", {"s.yaml": alias_bomb}),
    Case(
        "hosts-trillion",
        ("validate", "s.yaml"),
        "error",
        "hosts",
        {"s.yaml": spec("trays:\n  - hosts: n[1-1000000000000]\n")},
    ),
    Case(
        "hosts-10M",
        ("validate", "s.yaml"),
        "error",
        "hosts",
        {"s.yaml": spec("trays:\n  - hosts: n[1-10000000]\n")},
    ),
    Case(
        "hosts-999999",
        ("validate", "s.yaml"),
        "error",
        "",
        {"s.yaml": spec("trays:\n  - hosts: n[1-999999]\n")},
    ),
    Case(
        "hosts-product",
        ("validate", "s.yaml"),
        "error",
        "hosts",
        {"s.yaml": spec("trays:\n  - hosts: n[1-1000]-[1-1000]-[1-1000]\n")},
    ),
    Case(
        "hosts-many-terms",
        ("validate", "s.yaml"),
        "error",
        "hosts",
        {"s.yaml": spec("trays:\n  - hosts: " + ",".join(f"a{i}" for i in range(100_000)) + "\n")},
    ),
    Case(
        "hosts-groups-total",
        ("validate", "s.yaml"),
        "error",
        "trays",
        {
            "s.yaml": spec(
                "trays:\n"
                + "".join(f"  - {{hosts: 'g{i}-[1-60000]', hcas: 0, gpus: 0}}\n" for i in range(40))
            )
        },
    ),
    Case(
        "hosts-49151-trays-8-rails",
        ("validate", "s.yaml"),
        "error",
        "LID",
        {"s.yaml": spec("trays:\n  - {hosts: 'n[1-49151]', hcas: 8}\n")},
    ),
    Case(
        "nodes-trillion", ("topology", "lab", "--nodes", "n[1-1000000000000]"), "error", "--nodes"
    ),
    Case("trays-1e9-h100", ("validate", "h100-su", "--trays", "1000000000"), "error", "--trays"),
    Case("trays-1e9-gb200", ("validate", "gb200-su", "--trays", "1000000000"), "error", "--trays"),
    Case("trays-49151-gb200", ("validate", "gb200-su", "--trays", "49151"), "error", "LID"),
    Case(
        "name-pattern-width",
        ("validate", "s.yaml"),
        "error",
        "names",
        {
            "s.yaml": spec(
                "trays:\n  - hosts: n[1-4]\n",
                "fabric: {fat_tree: {names: {leaf: '{n:500000000d}'}}}\n",
            )
        },
    ),
    Case(
        "name-pattern-precision",
        ("validate", "s.yaml"),
        "error",
        "names",
        {
            "s.yaml": spec(
                "trays:\n  - hosts: n[1-4]\n",
                "fabric: {fat_tree: {names: {leaf: '{n:.400000000f}'}}}\n",
            )
        },
    ),
    Case(
        "nvlink-name-width",
        ("validate", "s.yaml"),
        "error",
        "nvlink",
        {
            "s.yaml": spec(
                "trays:\n  - hosts: n[1-4]\nnvlink: {trays_per_domain: 2, name: '{n:>900000000}'}\n"
            )
        },
    ),
    Case(
        "nvlink-trays-trillion",
        ("validate", "s.yaml"),
        "error",
        "trays",
        {
            "s.yaml": spec(
                "trays:\n  - hosts: n[1-4]\nnvlink:\n  domains: [{name: d, trays: 'n[1-1000000000000]'}]\n"
            )
        },
    ),
    Case(
        "partition-gpu-range",
        ("validate", "s.yaml"),
        "error",
        "gpus",
        {
            "s.yaml": spec(
                "trays:\n  - hosts: n[1-4]\nnvlink:\n  domains:\n    - name: d\n"
                "      trays: n[1-4]\n      partitions: [{id: 7, gpus: 'n1:0-1000000000000'}]\n"
            )
        },
    ),
    Case(
        "explicit-ca-ports-past-lids",
        ("validate", "s.yaml"),
        "error",
        "LID",
        {"s.yaml": lambda: many_cas(200, 254)},
    ),
    Case(
        "dump-99999999-ports",
        IMPORT,
        "error",
        "port",
        _dump("SW  1 99999999 0x1 4x NDR - CA 2 1 0x2 ( 'a' - 'b' )\n"),
    ),
    Case(
        "dump-switch-999-ports",
        IMPORT,
        "warn",
        "999",
        _dump(TINY_DUMP.replace("Switch\t65", "Switch\t999")),
        validate_output="out.yaml",
    ),
    Case(
        "dump-ports-line-999",
        IMPORT,
        "warn",
        "port",
        _dump(PORTS_LINE + "SW     1 999 0x2c5eab0352b1773e 4x SDR  'MF0;L1:MQM9701/U1'\n"),
        validate_output="out.yaml",
    ),
    # --- B: slow inputs --------------------------------------------------------------
    Case(
        "dump-ports-100k-line",
        IMPORT,
        "error",
        "",
        _dump("SW 1 1 0x1 4x NDR - SW 2 1 0x2 ( '" + "a' - '" * 16_000 + "b )\n"),
    ),
    Case(
        "dump-garbage-50MB",
        IMPORT,
        "error",
        "no nodes",
        {"dump.txt": lambda: garbage_dump(50 << 20)},
        lines=SHOWN + 2,
    ),
    Case(
        "dump-garbage-50MB-topology",
        ("topology", "--ibnetdiscover", "dump.txt"),
        "error",
        "no nodes",
        {"dump.txt": lambda: garbage_dump(50 << 20)},
        lines=SHOWN + 2,
    ),
    Case(
        "dump-node-then-50MB-garbage",
        IMPORT,
        "warn",
        "more warnings",
        {"dump.txt": lambda: TINY_DUMP.encode() + garbage_dump(50 << 20) + b"\n"},
        validate_output="out.yaml",
    ),
    Case(
        "ports-dump-then-50MB-garbage",
        IMPORT,
        "warn",
        "more warnings",
        {"dump.txt": lambda: PORTS_LINE.encode() + garbage_dump(50 << 20) + b"\n"},
        validate_output="out.yaml",
    ),
    Case(
        "smi-million-lines",
        ("topology", "--ibnetdiscover", "dump.txt", "--nvidia-smi", "smi.txt"),
        "warn",
        "",
        {
            "dump.txt": TINY_DUMP.encode(),
            "smi.txt": lambda: b"n1: GPU-0, 1\n" * 250_000 + b"n2: garbage line\n" * 250_000,
        },
    ),
    Case(
        "topologies-alias-bomb",
        ("topology", "lab", "-e", "slurm-yaml", "--topologies", "t.yaml"),
        "error",
        "alias",
        {"t.yaml": alias_bomb},
    ),
    Case(
        "topologies-bad-types",
        ("topology", "lab", "-e", "slurm-yaml", "--topologies", "t.yaml"),
        "error",
        "nodes",
        {"t.yaml": b"t1: {plugin: topology/tree, nodes: 5, block_sizes: abc}\n"},
    ),
    Case(
        "topologies-huge-node-lists",
        ("topology", "lab", "-e", "slurm-yaml", "--topologies", "t.yaml"),
        "error",
        "nodes",
        {
            "t.yaml": b"t1: {plugin: topology/tree, nodes: ["
            + b",".join(b"'g%d-[1-60000]'" % i for i in range(100))
            + b"]}\n"
        },
    ),
    Case("dump-binary", IMPORT, "error", "binary", {"dump.txt": lambda: random_bytes(3, 1 << 20)}),
    Case(
        "spec-million-keys",
        ("validate", "s.yaml"),
        "error",
        "",
        {"s.yaml": million_keys},
        lines=SHOWN + 1,
    ),
    Case(
        "spec-200k-unknown-keys",
        ("validate", "s.yaml"),
        "error",
        "unknown key",
        {"s.yaml": lambda: many_keys(200_000)},
        lines=SHOWN + 1,
    ),
    Case(
        "nodes-file-50k",
        ("topology", "lab", "--nodes", "nodes.txt"),
        "warn",
        "not in the fabric",
        {"nodes.txt": lambda: nodes_file(50_000)},
    ),
    Case(
        "nodes-hostlist-65536",
        ("topology", "lab", "--nodes", "cpu-[00001-65536]"),
        "warn",
        "not in the fabric",
    ),
    # --- C: addressing ---------------------------------------------------------------
    Case(
        "lid-past-bfff",
        ("validate", "s.yaml"),
        "error",
        "LID",
        {"s.yaml": explicit(cas="[{name: c, desc: 'c HCA-1', lids: [49152]}]")},
    ),
    Case(
        "lid-negative",
        ("validate", "s.yaml"),
        "error",
        "",
        {"s.yaml": explicit(cas="[{name: c, desc: 'c HCA-1', lids: [-1]}]")},
    ),
    Case(
        "lid-duplicate",
        ("validate", "s.yaml"),
        "error",
        "LID 5",
        {"s.yaml": explicit(switches="[{name: s1, lid: 5}, {name: s2, lid: 5}]")},
    ),
    Case(
        "lid-duplicate-ca",
        ("validate", "s.yaml"),
        "error",
        "LID 7",
        {
            "s.yaml": explicit(
                switches="[{name: s1, lid: 7}]", cas="[{name: c, desc: 'c HCA-1', lids: [7]}]"
            )
        },
    ),
    Case(
        "lmc-past-top",
        ("validate", "s.yaml"),
        "error",
        "LMC",
        {"s.yaml": explicit(switches="[{name: s1, lid: 49150, lmc: 2}]")},
    ),
    Case(
        "lmc-overlap",
        ("validate", "s.yaml"),
        "error",
        "LID 6",
        {"s.yaml": explicit(switches="[{name: s1, lid: 4, lmc: 2}, {name: s2, lid: 6}]")},
    ),
    Case(
        "lid-switch-base-past-top",
        ("validate", "s.yaml"),
        "error",
        "LID",
        {"s.yaml": explicit(switches="[{name: s1}, {name: s2}]") + b"lids: {switch_base: 49151}\n"},
    ),
    Case(
        "guid-port-equals-switch",
        ("validate", "s.yaml"),
        "error",
        "GUID 0x0000000000000010",
        {
            "s.yaml": explicit(
                switches="[{name: s1, guid: '0x10'}]",
                cas="[{name: c, desc: 'c HCA-1', guid: '0x20', port_guids: ['0x10']}]",
            )
        },
    ),
    Case(
        "guid-over-64-bits",
        ("validate", "s.yaml"),
        "error",
        "0xffffffffffffffff",
        {"s.yaml": explicit(switches="[{name: s1, guid: '0x1ffffffffffffffff'}]")},
    ),
    Case(
        "guid-over-64-bits-int",
        ("validate", "s.yaml"),
        "error",
        "0xffffffffffffffff",
        {"s.yaml": explicit(switches="[{name: s1, guid: 36893488147419103231}]")},
    ),
    Case(
        "dump-lid-past-bfff",
        IMPORT,
        "warn",
        "LID",
        _dump(
            TINY_DUMP.replace("lid 101 lmc 0", "lid 60000 lmc 0").replace(
                "lid 101 4x", "lid 60000 4x"
            )
        ),
        validate_output="out.yaml",
    ),
    Case(
        "dump-duplicate-lids",
        IMPORT,
        "warn",
        "LID 100",
        _dump(TINY_DUMP.replace("lid 101", "lid 100")),
        validate_output="out.yaml",
    ),
    Case(
        "dump-guid-over-64-bits",
        IMPORT,
        "warn",
        "GUID",
        _dump(TINY_DUMP.replace("e09d730305ab5c45", "1e09d730305ab5c45")),
        validate_output="out.yaml",
    ),
    Case(
        "dump-lmc-past-top",
        IMPORT,
        "warn",
        "LMC",
        _dump(
            TINY_DUMP.replace("lid 101 lmc 0", "lid 49150 lmc 3").replace(
                "lid 101 4x", "lid 49150 4x"
            )
        ),
        validate_output="out.yaml",
    ),
    Case(
        "dump-truncated-mid-line",
        IMPORT,
        "warn",
        "truncated",
        _dump(TINY_DUMP[:-20]),
        validate_output="out.yaml",
    ),
    Case(
        "dump-truncated-ids",
        IMPORT,
        "warn",
        "truncated",
        _dump(TINY_DUMP.rsplit("Ca\t1", 1)[0]),
        validate_output="out.yaml",
    ),
    Case(
        "dump-truncated-guid",
        IMPORT,
        "warn",
        "",
        _dump(TINY_DUMP[: TINY_DUMP.rindex("(e09d73") + 7]),
        validate_output="out.yaml",
    ),
    Case(
        "dump-long-description",
        IMPORT,
        "warn",
        "64 bytes",
        _dump(TINY_DUMP.replace('"n1 mlx5_0"', '"n1 ' + "x" * 100 + '"')),
        validate_output="out.yaml",
    ),
    Case(
        "dump-desc-breaks-names",
        IMPORT,
        "ok",
        "",
        _dump(TINY_DUMP.replace("MF0;L1:", "MF0;a [1] -- b:")),
        validate_output="out.yaml",
    ),
    # --- D: internal errors where a one-line error belongs -----------------------------
    Case(
        "spec-binary",
        ("validate", "s.yaml"),
        "error",
        "binary",
        {"s.yaml": lambda: random_bytes(5, 4096)},
    ),
    Case(
        "spec-not-utf8",
        ("validate", "s.yaml"),
        "error",
        "UTF-8",
        {"s.yaml": "name: caf\xe9\nfabric: {fat_tree: {}}\n".encode("latin-1")},
    ),
    Case(
        "yaml-deep-nesting",
        ("validate", "s.yaml"),
        "error",
        "depth",
        {"s.yaml": b"name: " + b"[" * 100_000 + b"]" * 100_000 + b"\n"},
    ),
    Case(
        "yaml-deep-mappings",
        ("validate", "s.yaml"),
        "error",
        "depth",
        {"s.yaml": b"name: " + b"{a: " * 20_000 + b"1" + b"}" * 20_000 + b"\n"},
    ),
    Case(
        "yaml-nesting-100",
        ("validate", "s.yaml"),
        "error",
        "depth",
        {"s.yaml": b"name: " + b"[" * 100 + b"]" * 100 + b"\n"},
    ),
    Case(
        "yaml-recursive-alias",
        ("validate", "s.yaml"),
        "error",
        "alias",
        {"s.yaml": b"name: &a [*a]\nfabric: {fat_tree: {}}\n"},
    ),
    Case(
        "yaml-timestamp",
        ("validate", "s.yaml"),
        "ok",
        "",
        {"s.yaml": TINY_SPEC.replace("name: tiny", "name: 2024-13-45").encode()},
    ),
    Case(
        "yaml-two-documents",
        ("validate", "s.yaml"),
        "error",
        "document",
        {"s.yaml": b"fabric: {fat_tree: {}}\n---\nfabric: {fat_tree: {}}\n"},
    ),
    Case(
        "yaml-complex-key",
        ("validate", "s.yaml"),
        "error",
        "key",
        {"s.yaml": b"? [a, b]\n: 1\nfabric: {fat_tree: {}}\n"},
    ),
    Case(
        "yaml-python-tag",
        ("validate", "s.yaml"),
        "error",
        "tag",
        {
            "s.yaml": b"name: !!python/object/apply:os.system ['echo pwned']\nfabric: {fat_tree: {}}\n"
        },
    ),
    Case(
        "yaml-5000-digits",
        ("validate", "s.yaml"),
        "error",
        "digits",
        {"s.yaml": b"lids: {switch_base: " + b"9" * 5000 + b"}\nfabric: {fat_tree: {}}\n"},
    ),
    Case(
        "yaml-5000-digit-key",
        ("validate", "s.yaml"),
        "error",
        "digits",
        {"s.yaml": b"9" * 5000 + b": 1\nfabric: {fat_tree: {}}\n"},
    ),
    Case(
        "spec-huge-file", ("validate", "s.yaml"), "error", "MiB", setup=sparse("s.yaml", 200 << 20)
    ),
    Case(
        "spec-unreadable-dir",
        ("validate", "locked/spec.yaml"),
        "error",
        "ermission",
        setup=unreadable_dir,
        drop_dac=True,
    ),
    Case(
        "source-date-epoch-1e400",
        ("render", "lab", "ibnetdiscover"),
        "error",
        "SOURCE_DATE_EPOCH",
        env={"SOURCE_DATE_EPOCH": "1e400"},
    ),
    Case(
        "source-date-epoch-huge",
        ("render", "lab", "ibnetdiscover"),
        "error",
        "SOURCE_DATE_EPOCH",
        env={"SOURCE_DATE_EPOCH": "99999999999999999999"},
    ),
    # devices and FIFOs: refused before any read (a FIFO with no writer would hang the
    # read, /dev/zero never ends)
    Case("spec-dev-zero", ("validate", "/dev/zero"), "error", "is a character device"),
    Case(
        "dump-dev-urandom",
        ("import", "/dev/urandom", "-o", "out.yaml"),
        "error",
        "not a regular file",
    ),
    Case("nodes-dev-zero", ("topology", "lab", "--nodes", "/dev/zero"), "error", "not a regular"),
    Case("scenario-dev-zero", ("scenario", "run", "/dev/zero"), "error", "not a regular file"),
    Case("spec-fifo", ("validate", "s.yaml"), "error", "is a FIFO", setup=fifo("s.yaml")),
    Case("inspect-fifo", ("inspect", "s.yaml"), "error", "is a FIFO", setup=fifo("s.yaml")),
    Case("dump-fifo", IMPORT, "error", "is a FIFO", setup=fifo("dump.txt")),
    Case(
        "check-dump-fifo",
        ("check", "lab", "--ibnetdiscover", "dump.txt"),
        "error",
        "is a FIFO",
        setup=fifo("dump.txt"),
    ),
    Case(
        "nodes-fifo",
        ("topology", "lab", "--nodes", "nodes.txt"),
        "error",
        "is a FIFO",
        setup=fifo("nodes.txt"),
    ),
    Case("scenario-fifo", ("scenario", "run", "s.yaml"), "error", "FIFO", setup=fifo("s.yaml")),
    Case(
        "topology-dump-fifo",
        ("topology", "--ibnetdiscover", "dump.txt"),
        "error",
        "is a FIFO",
        setup=fifo("dump.txt"),
    ),
    Case(
        "topologies-fifo",
        ("topology", "lab", "-e", "slurm-yaml", "--topologies", "t.yaml"),
        "error",
        "is a FIFO",
        setup=fifo("t.yaml"),
    ),
    Case(
        "sm-config-fifo",
        ("up", "lab", "--sm", "--sm-config", "o.conf", "--name", "hostile-fifo"),
        "error",
        "--sm-config o.conf: is a FIFO",
        setup=fifo("o.conf"),
        env={"FABRICLAB_STATE_DIR": "state"},
    ),
    Case(
        "partitions-fifo",
        ("up", "lab", "--sm", "--partitions", "p.conf", "--name", "hostile-fifo"),
        "error",
        "--partitions p.conf: is a FIFO",
        setup=fifo("p.conf"),
        env={"FABRICLAB_STATE_DIR": "state"},
    ),
    Case("spec-is-a-directory", ("validate", "."), "error", ""),
    Case("spec-arg-300-chars", ("validate", "x" * 300), "error", "preset"),
    Case(
        "dump-5000-digits",
        IMPORT,
        "warn",
        "",
        _dump(TINY_DUMP.replace("Switch\t65", "Switch\t" + "9" * 5000)),
        validate_output="out.yaml",
    ),
    Case(
        "dump-5000-digit-lid",
        IMPORT,
        "warn",
        "",
        _dump(TINY_DUMP.replace("lid 100 4x", "lid " + "1" * 5000 + " 4x")),
        validate_output="out.yaml",
    ),
    Case(
        "dump-self-link",
        IMPORT,
        "warn",
        "itself",
        _dump(
            TINY_DUMP.replace(
                '[2]\t"H-e09d730305ab5c45"[1](e09d730305ab5c45)', '[3]\t"S-2c5eab0352b1773e"[3]'
            )
        ),
        validate_output="out.yaml",
    ),
    Case(
        "dump-port-0",
        IMPORT,
        "warn",
        "port 0",
        _dump(TINY_DUMP.replace('[2]\t"H-e09d730305ab5c45"[1]', '[0]\t"H-e09d730305ab5c45"[1]')),
        validate_output="out.yaml",
    ),
    Case(
        "dump-ports-self-link",
        IMPORT,
        "warn",
        "itself",
        _dump(
            PORTS_LINE
            + "SW 1 3 0x2c5eab0352b1773e 4x NDR - SW 1 3 0x2c5eab0352b1773e ( 'a' - 'a' )\n"
        ),
        validate_output="out.yaml",
    ),
    Case(
        "dump-ports-port-0",
        IMPORT,
        "warn",
        "port 0",
        _dump(PORTS_LINE + "SW 1 0 0x2c5eab0352b1773e 4x NDR - CA 9 1 0x99 ( 'a' - 'b' )\n"),
        validate_output="out.yaml",
    ),
    Case(
        "dump-unreadable",
        ("import", "locked/spec.yaml", "-o", "out.yaml"),
        "error",
        "ermission",
        setup=unreadable_dir,
        drop_dac=True,
    ),
    Case(
        "nodes-36-names",
        ("topology", "lab", "--nodes", ",".join(f"some-long-node-name-{i:03d}" for i in range(36))),
        "warn",
        "not in the fabric",
    ),
    Case("nodes-arg-300-chars", ("topology", "lab", "--nodes", "n" * 300), "error", "--nodes"),
    Case(
        "nodes-binary-file",
        ("topology", "lab", "--nodes", "nodes.txt"),
        "error",
        "binary",
        {"nodes.txt": b"\x00\x01\x02garbage\xff\n"},
    ),
    Case("trays-0", ("validate", "lab", "--trays", "0"), "error", "--trays"),
    Case("trays-negative", ("validate", "gb200-su", "--trays", "-5"), "error", "--trays"),
    Case("trays-not-a-number", ("validate", "gb200-su", "--trays", "many"), "error", "--trays"),
    Case("unknown-option", ("validate", "lab", "--colour", "red"), "error", "--colour"),
    Case("missing-argument", ("validate",), "error", "SPEC"),
    Case(
        "serve-topology-port-99999", ("serve-topology", "lab", "--port", "99999"), "error", "--port"
    ),
    Case(
        "gpus-per-hca-huge",
        ("import", "dump.txt", "-o", "out.yaml", "--gpus-per-hca", "1000"),
        "error",
        "--gpus-per-hca",
        _dump(TINY_DUMP),
    ),
    Case(
        "hostlist-long-name",
        ("validate", "s.yaml"),
        "error",
        "64",
        {"s.yaml": spec("trays:\n  - hosts: " + "h" * 100 + "[1-2]\n")},
    ),
    Case(
        "link-5000-digit-port",
        ("validate", "s.yaml"),
        "error",
        "",
        {
            "s.yaml": explicit(
                switches="[{name: s1}, {name: s2}]", links="['s1[" + "9" * 5000 + "] -- s2[1]']"
            )
        },
    ),
    Case(
        "link-long-spaces",
        ("validate", "s.yaml"),
        "error",
        "",
        {"s.yaml": explicit(switches="[{name: s1}]", links="['" + " " * 200_000 + "x']")},
    ),
    # --- collectives: node lists, sizes and sweeps that would not end --------------------
    Case(
        "collective-nodes-trillion",
        ("collective", "lab", "--op", "all-reduce", "--size", "1", "--nodes", "n[1-1000000000000]"),
        "error",
        "names more than",
    ),
    Case(
        "collective-size-zettabytes",
        (
            "collective",
            "lab",
            "--op",
            "all-reduce",
            "--size",
            "99999999999G",
            "--nodes",
            "sched-worker[1-2]",
        ),
        "error",
        "--size",
    ),
    Case(
        "nccl-tests-endless-sweep",
        (
            "nccl-tests",
            "lab",
            "--nodes",
            "sched-worker[1-2]",
            "--",
            "all_reduce_perf",
            "-b",
            "1",
            "-e",
            "8G",
            "-i",
            "1",
        ),
        "error",
        "more than 10000 sizes",
    ),
    Case(
        "nccl-tests-huge-iterations",
        (
            "nccl-tests",
            "lab",
            "--nodes",
            "sched-worker[1-2]",
            "--",
            "all_reduce_perf",
            "-n",
            "99999999999999999999999",
        ),
        "ok",
    ),
]

# --- running ----------------------------------------------------------------------------


@dataclass
class Outcome:
    rc: int | None  # None: killed (timeout or signal)
    wall: float
    rss_mb: float
    stdout: str
    stderr: str
    timed_out: bool = False
    signal: int | None = None

    @property
    def hit_limit(self) -> bool:
        """Stopped by the address-space limit (MemoryError, or killed by the allocator)."""
        return (
            "MemoryError" in self.stderr
            or "std::bad_alloc" in self.stderr
            or (
                self.signal in (signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL)
                and not self.timed_out
            )
        )

    def summary(self) -> str:
        if self.timed_out:
            return "timeout"
        if self.hit_limit:
            return "killed at limit"
        if self.signal:
            return f"signal {self.signal}"
        if self.rc == 70 or "Traceback" in self.stderr:
            return "internal error"
        return f"exit {self.rc}"


def _limits(as_bytes: int) -> Callable[[], None]:
    def pre() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return pre


# root reads any file: util-linux's setpriv drops the two capabilities that allow it
_NO_DAC = [
    "setpriv",
    "--inh-caps=-dac_override,-dac_read_search",
    "--bounding-set=-dac_override,-dac_read_search",
    "--",
]


def run(
    case: Case,
    workdir: Path,
    *,
    python: str = sys.executable,
    pythonpath: str | None = None,
    timeout: float = 10.0,
    as_limit: int = 2 << 30,
    args: tuple[str, ...] | None = None,
) -> Outcome:
    """Run one case (its files already written to ``workdir``) as a child process."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1733000000", "COLUMNS": "160", **case.env}
    env.pop("FABRICLAB_DEBUG", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out_path, err_path = workdir / ".stdout", workdir / ".stderr"
    argv = [python, "-m", "fabriclab.cli", *(args if args is not None else case.args)]
    if case.drop_dac and os.geteuid() == 0:
        argv = _NO_DAC + argv
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_limits(as_limit),
        )
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    sig = -proc.returncode if proc.returncode < 0 else None
    return Outcome(
        None if sig else proc.returncode,
        wall,
        usage.ru_maxrss / 1024,
        out_path.read_text(errors="replace"),
        err_path.read_text(errors="replace"),
        timed_out,
        sig,
    )


def problems(case: Case, o: Outcome) -> list[str]:
    """What is wrong with an outcome, for this case (empty: as it should be)."""
    bad = []
    lines = o.stderr.splitlines()
    if o.timed_out or o.signal:
        return [o.summary()]
    if "Traceback" in o.stderr or "error: internal" in o.stderr or o.rc == 70:
        bad.append("internal error / traceback")
    want_rc = {"error": 2, "warn": 1, "ok": 0}[case.want]
    if o.rc != want_rc:
        bad.append(f"exit {o.rc}, want {want_rc}")
    if case.want == "error":
        errors = [line for line in lines if line.startswith("error: ")]
        if not errors:
            bad.append("no 'error:' line")
        limit = case.lines if case.lines is not None else 1
        if len(errors) > limit:
            bad.append(f"{len(errors)} error lines, want at most {limit}")
    if case.want == "warn" and not any(line.startswith("warning: ") for line in lines):
        bad.append("no 'warning:' line")
    others = [line for line in lines if not line.startswith(("error: ", "warning: ", "wrote "))]
    if others:
        bad.append(f"stray stderr line {others[0][:100]!r}")
    allowed = (case.lines if case.lines is not None else 1) + SHOWN + 1
    if len(lines) > allowed:
        bad.append(f"{len(lines)} stderr lines, want at most {allowed}")
    if case.contains and case.contains not in o.stderr:
        bad.append(f"{case.contains!r} not in stderr")
    return bad
