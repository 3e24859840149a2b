"""Starting and stopping fabric servers: ``fabriclab up`` (in the foreground, or
detached: the same command run again in the background), the real OpenSM beside it
(``--sm``), ``down`` and ``status``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ... import eventlog
from ...errors import InputError, Problem
from ...ib import simwire
from ...model import net_cabling
from ...model.cluster import Cluster
from ...statedir import state_dir
from ..lan import build as lan
from ..lan import faults as lan_faults
from ..live import admin_requests, events, journal
from ..live.api import LiveFabric
from ..live.clock import VirtualClock, WallClock
from ..live.traffic.engine import TrafficEngine
from ..wire import admission, native, record
from ..wire.hosttcp import parse_allow, parse_host_listen, token_path
from ..wire.server import FabricServer
from . import apirecord, detach, progress, ways
from .admin import AdminServer, admin_path
from .opensm import SmLog, SmOptions, sm_gone, start_sm, stop_sm, subnet_up
from .records import Instance, NotRunning, check_name, check_name_free, stop
from .tools import Loader, Say, python_argv

SM_WAIT = 600.0  # seconds a detached ``up --sm`` waits for SUBNET UP
API_WAIT = 60.0  # seconds a detached ``up --api`` waits for the API to listen


@dataclass
class UpRequest:
    """What ``fabriclab up`` was asked."""

    spec: str
    name: str = simwire.DEFAULT_NAME
    trays: int | None = None
    listen: str | None = None  # [HOST:]PORT: remote (UDP) mode
    allow: str | None = None  # NETWORK[,NETWORK...] that may attach (UDP or TCP)
    host_listen: str | None = None  # [HOST:]PORT: the host library over TCP too
    api: str | None = None  # [HOST:]PORT: 'fabriclab api' beside the fabric
    allow_user: list[str] = field(default_factory=list)
    max_clients: int = admission.DEFAULT_MAX_CLIENTS
    sm: bool = False
    sm_at: str | None = None
    sm_via: str = "auto"  # how OpenSM attaches (tools.WAYS)
    sm_options: SmOptions = field(default_factory=SmOptions)  # its config, partitions ...
    verbose: int = 0
    detach: bool = False
    cold: bool = False  # ports power on with no LID until an SM assigns one
    swaps: list[str] = field(default_factory=list)  # "A,B": cables miswired on purpose
    virtual_clock: bool = False  # time moves only by 'fabriclab clock advance'
    resume: bool = False  # bring faults, traffic and counters back from the journal
    routed: bool = False  # up as if an SM had run: LIDs, routes, ports ACTIVE, SMInfo
    networks: bool = False  # the spec's other networks as namespaces (root)

    @property
    def with_sm(self) -> bool:
        """Whether OpenSM runs beside the server."""
        return self.sm or bool(self.sm_at)

    def foreground_argv(self) -> list[str]:
        """The command serving this request in the foreground (what ``--detach`` runs)."""
        argv = [*python_argv(), "up", self.spec, "--name", self.name]
        argv += ["-" + "v" * self.verbose] if self.verbose else []
        argv += ["--host-listen", self.host_listen] if self.host_listen else []
        argv += ["--api", self.api] if self.api else []
        argv += (["--listen", self.listen] if self.listen else []) + (
            ["--trays", str(self.trays)] if self.trays else []
        )
        argv += (["--sm"] if self.sm else []) + (["--sm-at", self.sm_at] if self.sm_at else [])
        argv += ["--sm-via", self.sm_via, *self.sm_options.argv()]
        argv += (["--allow", self.allow] if self.allow else []) + [
            "--max-clients",
            str(self.max_clients),
        ]
        argv += [a for u in self.allow_user for a in ("--allow-user", u)]
        argv += ["--cold"] if self.cold else []
        argv += ["--routed"] if self.routed else []
        argv += ["--networks"] if self.networks else []
        argv += [a for s in self.swaps for a in ("--swap", s)]
        argv += (["--virtual-clock"] if self.virtual_clock else []) + (
            ["--resume"] if self.resume else []
        )
        return argv


def up(req: UpRequest, load: Loader, say: Say) -> None:
    """Serve the fabric of ``req.spec``: detached (back once it is up, and with OpenSM
    once the subnet is up), or in the foreground until SIGTERM or SIGINT."""
    check_name(req.name)
    if req.routed and req.cold:
        raise InputError(
            [Problem("--routed", "not with --cold: a routed fabric has its LIDs assigned")]
        )
    if req.networks and os.geteuid() != 0:
        raise InputError([Problem("--networks", "building network namespaces needs root")])
    addr = ways.parse_listen(req.listen)
    if req.host_listen is not None:
        if addr is not None:
            raise InputError(
                [
                    Problem(
                        "--host-listen",
                        "not with --listen: the host library is for a "
                        "fabric served on this machine's sockets",
                    )
                ]
            )
        parse_host_listen(req.host_listen)
        parse_allow([req.allow] if req.allow else None)
    udp_allow = None if req.host_listen else admission.parse_networks(req.allow)
    networks = admission.exposure(addr, udp_allow)
    policy = admission.Policy(
        uids=admission.parse_users(req.allow_user),
        networks=networks,
        max_clients=admission.check_max_clients(req.max_clients),
    )
    phases = progress.shown() if req.detach else progress.for_server()
    try:
        _up(req, addr, policy, load, say, phases)
    finally:
        phases.close()


def _up(
    req: UpRequest,
    addr: tuple[str, int] | None,
    policy: admission.Policy,
    load: Loader,
    say: Say,
    phases: progress.Phases,
) -> None:
    phases.phase("building", req.spec + (f", {req.trays} trays" if req.trays else ""))
    cluster = load(req.spec, req.trays)
    net_cabling.swap_all(cluster, req.swaps, req.networks)  # the spec stays the intended one
    check_name_free(req.name, local=addr is None)
    req.sm_options = req.sm_options.checked(req.with_sm)  # its files, before anything starts
    if req.with_sm or (req.routed and req.sm_at):
        where = req.sm_at or (cluster.trays[0].host if cluster.trays else "")
        port, problem = cluster.locate(where, switches=True)
        if port is None:
            raise InputError(
                [Problem("--sm-at", problem or "the fabric has no tray to run OpenSM on")]
            )
    if req.routed and cluster.cold_start:
        raise InputError(
            [Problem("--routed", "the spec powers on cold (lids.power_on: cold): no LIDs to keep")]
        )
    if req.networks and (cluster.networks is None or not cluster.networks.endpoints):
        raise InputError([Problem("--networks", f"{req.spec} declares no networks")])
    if req.networks and cluster.networks is not None:
        lan.check_room(cluster.networks)
    log_file = state_dir(create=True) / f"{req.name}.log"
    networks = policy.networks
    if addr and any(not n.subnet_of(admission.LOOPBACK) for n in networks):
        say(
            f"warning: UDP {addr[0]}:{addr[1]}: the ibsim protocol has no authentication: "
            f"any host in {','.join(map(str, networks))} can attach and drive the fabric"
        )
    if req.detach:
        _up_detached(req, cluster, log_file, say, phases)
    else:
        _serve(req, cluster, addr, policy, log_file, say, phases)


def _up_detached(
    req: UpRequest, cluster: Cluster, log_file: Path, say: Say, phases: progress.Phases
) -> None:
    r, w = os.pipe()  # the detached up's phases come back on it
    try:
        relay = progress.Relay(r, phases)
        inst = detach.spawn_detached(req.foreground_argv(), req.name, log_file, relay=(relay, w))
    finally:
        os.close(w)
    say(f"fabric {req.name!r} up: {cluster.name}, pid {inst.pid}, log {log_file}")
    try:
        _wait_ready(req, inst, relay)
        if req.host_listen is not None:
            rec = Instance.load(req.name)
            if rec.host_listen:
                say(
                    f"host library over TCP at {ways.host_port(rec.host_listen)}, "
                    f"its token in {rec.host_token}"
                )
        if req.api is not None:
            _say_api(req.name, inst, say)
    except BaseException:  # up failed or was given up: it leaves no server behind
        with contextlib.suppress(NotRunning):
            stop(req.name)
        raise
    finally:
        relay.close()
    if req.with_sm:
        say("subnet up (OpenSM)")


def _say_api(name: str, inst: Instance, say: Say) -> None:
    """Wait for the API beside the fabric to listen, and say where."""
    deadline = time.monotonic() + API_WAIT
    while (doc := apirecord.load(name)) is None:
        if time.monotonic() > deadline or not inst.alive():
            why = f"did not start in {API_WAIT:g} s (see {inst.log})"
            raise InputError([Problem("--api", why)])
        time.sleep(0.05)
    say(f"API at {doc['url']} (/metrics, /ufmRest, /api/v1, the page at /)")


def _wait_ready(req: UpRequest, inst: Instance, relay: progress.Relay) -> None:
    """Show the detached up's phases until it is ready (with OpenSM: the subnet up)."""
    deadline = time.monotonic() + (SM_WAIT if req.with_sm else 10.0)
    while time.monotonic() < deadline:
        last = relay.pump()
        if not req.with_sm and (last == "ready" or relay.fd is None):
            return
        if req.with_sm and subnet_up(inst):
            if relay.pump() != "ready":  # the server says so at its next tick
                relay.into.phase("ready", "subnet up (OpenSM)")
            return
        gone = sm_gone(inst) if req.with_sm else None
        if gone or not inst.alive():
            break
        time.sleep(0.1)
    if req.with_sm:
        why = f"OpenSM did not bring the subnet up (see {state_dir() / (req.name + '.opensm')})"
        raise InputError([Problem("--sm", sm_gone(inst) or why)])


def _serve(
    req: UpRequest,
    cluster: Cluster,
    addr: tuple[str, int] | None,
    policy: admission.Policy,
    log_file: Path,
    say: Say,
    phases: progress.Phases,
) -> None:
    """Serve in this process until a signal; the record says so meanwhile."""
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(req.verbose, 2)],
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    name = req.name
    where = f"UDP {addr[0]}:{addr[1]}" if addr else f"IBSIM_SOCKNAME={name}"
    phases.phase("serving", f"{where} ({native.chosen()} MAD core)")
    start, _ = cluster.locate(None)
    srv = FabricServer(
        cluster.fabric,
        name,
        listen=addr,
        policy=policy,
        resolve=lambda text: cluster.locate(text, switches=True),
        default_port=start,
        cold=req.cold or cluster.cold_start,
    )
    try:
        srv.bind()
    except OSError as e:
        check_name_free(name, local=addr is None)  # whose is the name
        raise InputError(
            [
                Problem(
                    where, f"cannot serve: {e.strerror} (another fabriclab or ibsim is using it?)"
                )
            ]
        ) from None
    if req.routed:  # as a subnet manager at --sm-at (default: the first tray) leaves it
        sm_port, _ = cluster.locate(req.sm_at, switches=True) if req.sm_at else (start, None)
        if sm_port is not None:
            srv.routed(srv.sim.port_of(sm_port))
    live, admin = _go_live(req, cluster, srv, record.from_env(srv, os.environ))
    link = None
    tcp = None
    if addr is None:  # the host library is for tools on this machine (or, told, over TCP)
        link = ways.host_link(cluster, srv, name)
        if req.host_listen is not None:
            tcp = ways.host_tcp(link, req.host_listen, req.allow, name)
    inst = Instance(
        name,
        os.getpid(),
        req.spec,
        req.trays,
        list(addr) if addr else None,
        str(log_file),
        time.time(),
    )
    inst.note_server(os.getpid())
    inst.host_socket = str(link.path) if link is not None else None
    if tcp is not None:
        inst.host_listen = list(tcp.addr)
        inst.host_token = str(token_path(state_dir(), name))
        say(f"host library over TCP at {ways.host_port(tcp.addr)}, its token in {inst.host_token}")
    sm_proc = None
    if req.with_sm:
        sm_proc = start_sm(
            inst,
            cluster,
            req.sm_at or cluster.trays[0].host,
            state_dir(),
            req.sm_via,
            req.sm_options,
        )
        inst.note_sm(sm_proc.pid)
        said: list[bool] = []
        sm_log = SmLog(inst)
        phases.phase("sweeping", "OpenSM starting")

        def watch_sm() -> None:
            if said:
                return
            state = sm_log.poll()
            if state != "SUBNET UP":
                phases.update(f"{state}, {srv.stats.answered} MADs answered")
                return
            said.append(True)
            say("subnet up (OpenSM)")
            phases.phase("ready", f"subnet up (OpenSM), {srv.stats.answered} MADs answered")
            phases.close()

        srv.on_tick.append(watch_sm)
    if req.networks and cluster.networks is not None:
        phases.phase("serving", "building the other networks")
        made = lan.build(name, cluster.networks)
        live.attach_net(
            lan_faults.NetFaults(
                name,
                cluster.networks,
                lambda what, obj, desc: live.event(events.NET_KINDS[what], obj, desc),
                live.clock.now,
            )
        )
        say(f"networks: {len(made)} namespaces (ip netns list; fabriclab networks --name {name})")
    inst.save()
    api_argv = ["api", "--name", name, "--listen", req.api or "", "--fabric-pid", str(os.getpid())]
    api_proc = apirecord.start([*python_argv(), *api_argv], log_file) if req.api else None
    srv.install_signal_handlers()
    f = cluster.fabric
    say(
        f"fabric {name!r} up ({where}): {cluster.name}, {len(f.switches())} switches, "
        f"{len(f.cas())} CAs, {f.link_count()} links; Ctrl-C stops it"
    )
    if sm_proc is None:
        phases.phase("ready", f"{cluster.name}, {f.link_count()} links")
        phases.close()
    try:
        srv.serve_forever()
    finally:
        if req.networks:
            lan.teardown(name)
        apirecord.stop(api_proc)
        if sm_proc is not None:
            stop_sm(sm_proc, srv)
        admin.close()
        if tcp is not None:
            tcp.close()
            token_path(state_dir(), name).unlink(missing_ok=True)
        if link is not None:
            link.close()
        live.close()
        srv.close()
        inst.path.unlink(missing_ok=True)
        st = srv.stats
        say(
            f"fabric {name!r} down: {st.mads} MADs, {st.answered} answered, "
            f"{st.forwarded} forwarded, {st.timed_out} timed out, {st.dropped} undeliverable, "
            f"{st.malformed} malformed, {st.unsent} not sent; "
            f"{st.refused} control requests refused, {st.failed} failed, "
            f"{st.outsiders} datagrams from outside the allowed networks"
        )


def _go_live(req: UpRequest, cluster: Cluster, srv: FabricServer, recorder=None):
    """The live fabric on ``srv`` (its clock, journal and event log; restored from the
    journal with ``--resume``) and its admin socket, served in the server's loop."""
    state = state_dir(create=True)
    meta = {"spec": req.spec, "trays": req.trays}
    doc = None
    path = journal.journal_path(state, req.name)
    if req.resume:
        doc = journal.load(path)
        if doc.get("meta") != meta:
            raise InputError(
                [
                    Problem(
                        "--resume",
                        f"the journal is of {doc.get('meta')}, not of {meta}: "
                        "resume with the same spec and --trays",
                    )
                ]
            )
        if bool(doc.get("virtual")) != req.virtual_clock:
            raise InputError(
                [Problem("--resume", "resume with the clock the fabric had (--virtual-clock)")]
            )
    else:  # a fresh fabric: a fresh event log
        eventlog.remove(eventlog.events_path(state, req.name))
    start = float(doc.get("clock", 0.0)) if doc else 0.0
    clock = VirtualClock(start) if req.virtual_clock else WallClock(start)
    engine = TrafficEngine(srv.sim, clock)
    engine.on_trap = srv.traps.bad_pkey
    live = LiveFabric(srv, cluster, clock, state=state, name=req.name, meta=meta, traffic=engine)
    if doc is not None:
        live.restore(doc, f"journal {path}")
    else:
        live.writer.ledger.at_power_on()
    live.save()
    answer = record.admin(recorder, functools.partial(admin_requests.answer, live))
    admin = AdminServer(admin_path(state, req.name), answer, srv.transport)
    admin.bind()
    srv.transport.on_wake = live.wake
    return live, admin
