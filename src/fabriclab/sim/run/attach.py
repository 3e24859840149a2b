"""``fabriclab attach``: a directory that makes any machine, container or network
namespace a tray of a running fabric, with nothing of fabriclab installed there.

DIR holds ``env`` (a POSIX sh file to source: the host library preloaded, the fabric,
the tray, and the way to the server: its TCP address and DIR/token when it listens on
TCP (``up --host-listen``), else its socket file), ``token`` (0600), ``lib/`` (a copy
of the built host library) and ``bin/`` (a wrapper per tool, sourcing ``env`` and
running the real tool of the machine it runs on).  Every path in them is relative to
where DIR is found, so DIR can be bind-mounted anywhere.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from ... import safedir
from ...errors import InputError, Problem
from ...statedir import open_state_file
from ..host import hostlib
from .records import Instance
from .tools import TOOLS, Loader

# where a wrapper looks for the real tool (Debian: infiniband-diags and opensm in /usr/sbin)
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/sbin:/usr/local/bin"
_LIB = "libfabriclab-umad.so"


def attach(name: str, tray: str, directory: Path, load: Loader, at: str | None = None) -> dict:
    """Write DIR for tray ``tray`` of the running fabric ``name``; what was written.
    ``at``: where the tray will see DIR (a mount point), if not where it is written."""
    inst = Instance.load(name)
    cluster = load(inst.spec, inst.trays)
    if cluster.tray(tray) is None:
        raise InputError([cluster.no_tray(tray)])
    if inst.listen:
        raise InputError(
            [
                Problem(
                    name,
                    "is served over UDP (up --listen): the host library needs a local "
                    "fabric or --host-listen",
                )
            ]
        )
    where = str(directory.resolve())
    seen = at or where
    for path in (where, seen):
        if any(c in path for c in " \t\n:'\"\\$`"):
            raise InputError(
                [Problem(path, "a path with blanks, quotes or colons cannot go in LD_PRELOAD")]
            )
    if not seen.startswith("/"):
        raise InputError([Problem(f"--at {seen}", "give an absolute path")])
    token = _token(inst) if inst.host_listen else None
    env = env_text(inst, tray, seen)
    library = Path(hostlib.library_path()).read_bytes()
    with safedir.open_dir(directory) as d:
        d.check_entries()
        d.write("env", env.encode(), 0o644)
        if token is not None:
            d.write("token", token.encode(), 0o600)
        elif d.entry("token") is not None:
            d.remove("token")
        with d.sub("lib") as lib:
            lib.write(_LIB, library, 0o755)
        with d.sub("bin") as bin_:
            bin_.check_entries()
            for tool in TOOLS:
                bin_.write(tool, wrapper(tool, tray, name).encode(), 0o755)
            bin_.write("sudo", _SUDO.encode(), 0o755)
    return {
        "fabric": name,
        "tray": tray,
        "dir": where,
        "at": seen,
        "way": "tcp" if inst.host_listen else "unix",
        "address": _address(inst),
        "env": f"{where}/env",
        "token": f"{where}/token" if token is not None else None,
        "lib": f"{where}/lib/{_LIB}",
        "bin": [*TOOLS, "sudo"],
    }


def _address(inst: Instance) -> str:
    if inst.host_listen:
        host, port = inst.host_listen
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return inst.host_socket or ""


def _token(inst: Instance) -> str:
    """The fabric's token, as its file holds it."""
    path = Path(inst.host_token or "")
    try:
        fd = open_state_file(path, os.O_RDONLY)
    except OSError as e:
        raise InputError([Problem(str(path), f"cannot read the token: {e.strerror}")]) from None
    with os.fdopen(fd) as f:
        return f.read(129)


def env_text(inst: Instance, tray: str, where: str) -> str:
    """DIR/env: the environment of a tool on ``tray``; DIR is FABRICLAB_ATTACH_DIR when
    set, else (bash) where the file is sourced from, else ``where``, where it was
    written."""
    q = shlex.quote
    lines = [
        f"# written by fabriclab attach: tools run as tray {tray} of fabric {inst.name!r}.",
        "# Source it (. DIR/env), then run them; mounted elsewhere, set FABRICLAB_ATTACH_DIR",
        "# to where DIR is first (bash finds it itself).",
        'if [ -z "${FABRICLAB_ATTACH_DIR:-}" ]; then',
        '  if [ -n "${BASH_SOURCE:-}" ]; then',
        '    FABRICLAB_ATTACH_DIR=$(cd "$(dirname "$BASH_SOURCE")" && pwd)',
        "  else",
        f"    FABRICLAB_ATTACH_DIR={q(where)}",
        "  fi",
        "fi",
        "export FABRICLAB_ATTACH_DIR",
        f'export LD_PRELOAD="$FABRICLAB_ATTACH_DIR/lib/{_LIB}"',
        f"export FABRICLAB_SOCKNAME={q(inst.name)}",
        f"export FABRICLAB_TRAY={q(tray)}",
    ]
    if inst.host_listen:
        lines += [
            f"export FABRICLAB_HOST_ADDR={q(_address(inst))}",
            'export FABRICLAB_HOST_TOKEN_FILE="$FABRICLAB_ATTACH_DIR/token"',
            "unset FABRICLAB_HOST_SOCKET FABRICLAB_OWNER",
        ]
    else:
        lines += [
            f"export FABRICLAB_HOST_SOCKET={q(inst.host_socket or '')}",
            f"export FABRICLAB_OWNER={os.geteuid()}",
            "unset FABRICLAB_HOST_ADDR FABRICLAB_HOST_TOKEN_FILE",
        ]
    lines += [
        "unset SIM_HOST IBSIM_SOCKNAME IBSIM_SERVER_NAME IBSIM_SERVER_PORT",
        'case ":$PATH:" in',
        '  *":$FABRICLAB_ATTACH_DIR/bin:"*) ;;',
        '  *) PATH="$FABRICLAB_ATTACH_DIR/bin:$PATH" ;;',
        "esac",
        "export PATH",
    ]
    return "\n".join(lines) + "\n"


def wrapper(tool: str, tray: str, name: str) -> str:
    """DIR/bin/TOOL: the real tool of this machine, run with DIR/env.  The wrapper may
    be called through a link (``ln -s DIR/bin/* /usr/local/sbin/``): it resolves where
    it lives, and never takes itself for the real tool."""
    q = shlex.quote(tool)
    dirs = " ".join(_SYSTEM_PATH.split(":"))
    return (
        f"#!/bin/sh\n# written by fabriclab attach: {tool} as tray {tray} of fabric {name!r}\n"
        'self=$0; [ -L "$self" ] && self=$(readlink -f "$self")\n'
        'FABRICLAB_ATTACH_DIR=$(cd "$(dirname "$self")/.." && pwd) || exit 1\n'
        'self=$(readlink -f "$self")\n'
        f"for d in {dirs}; do\n"
        f'  real="$d/"{q}\n'
        '  if [ -x "$real" ] && [ "$(readlink -f "$real")" != "$self" ]; then\n'
        '    . "$FABRICLAB_ATTACH_DIR/env" && exec "$real" "$@"\n'
        "  fi\n"
        "done\n"
        f'echo "fabriclab: {tool}: not installed here ({_SYSTEM_PATH})" >&2\n'
        "exit 127\n"
    )


_SUDO = (
    "#!/bin/sh\n# written by fabriclab attach: runs the command as the caller (the "
    "emulated tray's tools need no root)\n"
    'while [ $# -gt 0 ]; do case "$1" in -[ugCDhpRrTU]) shift 2 ;; --) shift; break ;;'
    " -*) shift ;; *) break ;; esac; done\n"
    'PATH="$(cd "$(dirname "$0")" && pwd):$PATH" exec "$@"\n'
)
