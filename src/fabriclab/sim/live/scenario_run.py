"""Where a scenario step runs: each step of a scenario file checked against the running
fabric before any runs, and carried out on the live fabric when it falls due (a fault,
a clear, a traffic command), its outcome kept in the scenario's log.

The file's format and parsing are :mod:`.scenario`; the API that starts a scenario is
:meth:`.api.LiveFabric.scenario`.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ...errors import FabriclabError, InputError, Problem
from .faults.options import check_options
from .faults.targets import Target
from .scenario import FAULT_VERBS, Scenario, Step
from .scenario import parse as parse_scenario


class LiveFabric(Protocol):
    """The calls of the live fabric (:class:`.api.LiveFabric`) a scenario's steps make."""

    clock: Any  # its clock: virtual or wall time (a flap period's bound)

    def resolve(self, text: str, kind: str = "down") -> Target: ...

    def fault(self, kind: str, target: str, **options) -> dict: ...

    def clear(self, fault_id: int | None = None) -> list[int]: ...

    def clear_target(self, target: str) -> list[int]: ...

    def check_traffic(self, args: list[str], options: dict) -> tuple: ...

    def traffic_request(self, verb: str, args: list[str], options: dict): ...


log = logging.getLogger("fabriclab.sim")


def parse(live: LiveFabric, text: str, source: str) -> Scenario:
    """The scenario in ``text`` (from ``source``), every step checked against ``live``;
    a problem is an error naming the line."""
    return parse_scenario(text, source, lambda step: check_step(live, step))


def check_step(live: LiveFabric, step: Step) -> None:
    """Whether ``step`` could run on ``live`` (its target exists, its options are
    right): an InputError if not."""
    verb, args = step.verb, step.args
    if verb == "traffic":
        live.check_traffic(args, step.options)
        return
    if verb == "clear":
        if len(args) != 1:
            raise InputError([Problem("clear", "want 'clear TARGET', 'clear ID' or 'clear all'")])
        if args[0] != "all" and not args[0].isdigit():
            live.resolve(args[0], "drop")
        return
    if len(args) != 1:
        raise InputError([Problem(verb, f"want '{verb} TARGET'")])
    t = live.resolve(args[0], verb)
    if verb != "up":
        check_options(verb, t, step.options, wall=not live.clock.virtual)


def run_step(live: LiveFabric, step: Step) -> None:
    """Carry out ``step`` on ``live``."""
    verb, args = step.verb, step.args
    if verb == "traffic":
        live.traffic_request(args[0], args[1:], step.options)
    elif verb == "clear":
        a = args[0]
        if a == "all":
            live.clear()
        elif a.isdigit():
            live.clear(int(a))
        else:
            live.clear_target(a)
    elif verb in FAULT_VERBS:
        live.fault(verb, args[0], **step.options)


def run_due(live: LiveFabric, scenarios: list[Scenario], now: float) -> list[Scenario]:
    """Carry out every step of ``scenarios`` due by ``now`` on ``live``, one at a time:
    the earliest due first, steps due at one time in the order the scenarios started
    and, within one, in file order.  A loop, not a recursion: the caller runs no step
    from inside a step (a step's own catching up, :attr:`Scenario.running`).  A step
    that fails is logged and the scenario goes on.  The scenarios not yet finished."""
    while not any(sc.running for sc in scenarios):  # (inside a step: none)
        due = [(d, i) for i, sc in enumerate(scenarios) if (d := sc.next_due()) is not None]
        if not due or min(due)[0] > now:
            break
        sc = scenarios[min(due)[1]]
        step = sc.steps[sc.done]
        sc.done += 1
        for other in scenarios:  # a step's own catching up runs none of the others
            other.running = True
        try:
            run_step(live, step)
            sc.log.append(f"{step.where}: {step.verb} {' '.join(step.args)}")
        except FabriclabError as e:
            sc.log.append(f"{step.where}: {e}")
            log.warning("scenario %s: %s: %s", sc.name, step.where, e)
        finally:
            for other in scenarios:
                other.running = False
    return [s for s in scenarios if not s.finished]
