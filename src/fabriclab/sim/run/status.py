"""What ``fabriclab status`` lists: each fabric that is up, how tools reach it, OpenSM's
state and the API beside it."""

from __future__ import annotations

from . import apirecord
from .opensm import subnet_up
from .records import running as running_records
from .ways import host_port


def status() -> list[tuple[str, str, str, str, str, str]]:
    """The fabrics that are up: name, pid, spec (and scale), how tools reach it,
    OpenSM's state, and the API's URL ("-" when none runs)."""
    rows = []
    for inst in running_records():
        reach = (
            f"UDP {inst.listen[0]}:{inst.listen[1]}"
            if inst.listen
            else f"IBSIM_SOCKNAME={inst.name}"
        )
        if inst.host_listen:
            reach += f", TCP {host_port(inst.host_listen)}"
        smstate = "-" if not inst.sm_pid else ("subnet up" if subnet_up(inst) else "sweeping")
        spec = inst.spec + (f" x{inst.trays}" if inst.trays else "")
        api = apirecord.load(inst.name)
        rows.append((inst.name, str(inst.pid), spec, reach, smstate, api["url"] if api else "-"))
    return rows
