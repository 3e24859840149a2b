"""Scenario files: a YAML timeline of faults, their clearing and traffic, checked whole
before any step runs.

::

    name: leaf-flap            # optional
    steps:                     # (or the list of steps alone)
      - at: 10s
        do: flap LAB-IBLEAF-01[17]
        period: 2s
        count: 5
      - at: 30s
        do: degrade sched-worker1/mlx5_0[1]
        width: 2x
      - {at: 40s, do: "clear sched-worker1/mlx5_0[1]"}

``do`` is ``VERB ARGS``: the verbs of ``fabriclab fault`` (down, up, flap, degrade,
errors, drop, nvlink; ``clear TARGET|ID|all``) and of ``fabriclab traffic`` (``traffic
send FROM TO``, ``traffic all-to-all SET``, ``traffic ring SET``, ``traffic stop
ID|all``); its words split as a shell splits them (``flap 'LAB-IBLEAF-01[9]'`` as
typed for ``fabriclab fault``), or a list of them (``do: [flap, "LAB-IBLEAF-01[9]"]``).
The other keys of a step are the command's options (``down-after`` or
``down_after``).  ``at`` is seconds from the start (``500ms``, ``10s``, ``2m``, or a
number).  Every problem is an error naming the file's line; a ``[`` that YAML itself
refuses (inside ``{...}``) is an error that shows the value quoted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ... import inputs
from ...errors import FabriclabError, InputError, Problem
from ...spec import yaml_guard
from . import durations

FAULT_VERBS = ("down", "up", "flap", "degrade", "errors", "drop", "nvlink", "clear")
TRAFFIC_VERBS = ("send", "all-to-all", "ring", "stop")
STEPS_MAX = 10000
_OPTIONS = {
    "down": set(),
    "up": set(),
    "flap": {"period", "count"},
    "degrade": {"width", "speed"},
    "errors": {"ber", "down_after"},
    "drop": {"rate", "seed"},
    "nvlink": {"gpus"},
    "clear": set(),
    "traffic": {"bytes", "rate", "timeout", "retry_count"},
}


@dataclass
class Step:
    """One step: when (seconds from the start), the verb and its words, its options."""

    at: float
    verb: str
    args: list[str]
    options: dict
    where: str  # FILE:LINE

    def to_json(self) -> dict:
        """For the journal."""
        return dict(self.__dict__)


@dataclass
class Scenario:
    """A checked timeline, and how far it has run."""

    name: str
    steps: list[Step]
    start: float = 0.0  # clock seconds when it began
    done: int = 0  # steps carried out
    log: list[str] = field(default_factory=list)
    # a step is being carried out: the live fabric catching up inside it runs no other
    # step of this scenario (steps at one time run in file order)
    running: bool = False

    @property
    def finished(self) -> bool:
        """Whether every step has run."""
        return self.done >= len(self.steps)

    def next_due(self) -> float | None:
        """When the next step is due (clock seconds); None while a step is running."""
        if self.finished or self.running:
            return None
        return self.start + self.steps[self.done].at

    def to_json(self) -> dict:
        """For the journal and the API."""
        return {
            "name": self.name,
            "start": self.start,
            "done": self.done,
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, d: dict) -> Scenario:
        """Back from the journal."""
        return cls(d["name"], [Step(**s) for s in d["steps"]], d["start"], d["done"])


def parse(text: str, source: str, check) -> Scenario:
    """The scenario in ``text`` (from file ``source``); ``check(step)`` validates a step
    against the running fabric (raising a FabriclabError).  The first problem is an
    InputError naming ``source:line``."""
    try:
        data = yaml_guard.load(text, source, InputError)
    except InputError as e:
        raise _with_quoting_hint(e, text) from None
    name = source
    steps_path: tuple = ()
    if isinstance(data, dict):
        unknown = set(data) - {"name", "steps"}
        if unknown:
            raise _at(
                text,
                source,
                (sorted(unknown, key=str)[0],),
                f"unknown key {sorted(unknown, key=str)[0]!r} (want name, steps)",
            )
        name = str(data.get("name", source))
        raw = data.get("steps")
        steps_path = ("steps",)
    else:
        raw = data
    if not isinstance(raw, list) or not raw:
        raise _at(text, source, steps_path, "want a list of steps (at:, do:)")
    if len(raw) > STEPS_MAX:
        raise _at(text, source, steps_path, f"{len(raw)} steps: at most {STEPS_MAX}")
    lines = yaml_guard.lines_for(
        text,
        {(*steps_path, i, k) for i, s in enumerate(raw) if isinstance(s, dict) for k in s}
        | {(*steps_path, i) for i in range(len(raw))},
    )
    steps = []
    for i, item in enumerate(raw):
        path = (*steps_path, i)

        def where(key=None, path=path) -> str:
            line = lines.get((*path, key)) if key is not None else None
            return f"{source}:{line or lines.get(path, '?')}"

        steps.append(_step(item, where, check))
    steps.sort(key=lambda s: s.at)  # stable: steps at one time run in file order
    return Scenario(name, steps)


def _at(text: str, source: str, path: tuple, what: str) -> InputError:
    line = yaml_guard.lines_for(text, {path}).get(path, 1)
    return InputError([Problem(f"{source}:{line}", what)])


def _step(item, where, check) -> Step:
    if not isinstance(item, dict):
        raise InputError([Problem(where(), "a step is a mapping with at: and do:")])
    if "at" not in item or "do" not in item:
        raise InputError([Problem(where(), "a step needs at: and do:")])
    at = durations.seconds(item["at"], where("at"))
    words = _words(item["do"], where("do"))
    verb, args = words[0], words[1:]
    if verb not in FAULT_VERBS and verb != "traffic":
        raise InputError(
            [
                Problem(
                    where("do"),
                    f"unknown verb {verb!r} (known: {', '.join((*FAULT_VERBS, 'traffic'))})",
                )
            ]
        )
    options = {}
    for k, v in item.items():
        if k in ("at", "do"):
            continue
        key = str(k).replace("-", "_")
        if key not in _OPTIONS[verb]:
            allowed = ", ".join(sorted(o.replace("_", "-") for o in _OPTIONS[verb])) or "none"
            raise InputError(
                [Problem(where(k), f"{verb} takes no option {k!r} (options: {allowed})")]
            )
        if key == "period":
            v = durations.seconds(v, where(k))
        elif key == "gpus" and isinstance(v, int) and not isinstance(v, bool):
            v = [v]  # gpus: 3, one GPU
        options[key] = v
    step = Step(at, verb, args, options, where("do"))
    try:
        check(step)
    except FabriclabError as e:
        p = e.problems[0]
        raise InputError([Problem(where("do"), str(p))]) from None
    except (TypeError, ValueError) as e:
        raise InputError([Problem(where("do"), str(e))]) from None
    return step


def _words(do, where: str) -> list[str]:
    """A step's ``do:``, ``VERB ARGS`` split as a shell splits them, or a list of words."""
    usage = "do: wants 'VERB ARGS', e.g. 'flap LEAF[17]'"
    if isinstance(do, list) and all(isinstance(w, str | int) for w in do):
        words = [str(w) for w in do]
    elif isinstance(do, str):
        try:
            words = shlex.split(do)
        except ValueError as e:  # an unclosed quote
            raise InputError([Problem(where, f"{usage}: {e}")]) from None
    else:
        words = []
    if not words or not all(w.strip() for w in words):
        raise InputError([Problem(where, usage)])
    return words


# In a flow collection ({...} or [...]) a plain value ends at ',' or ']' and YAML reads
# '[' as the start of a list: a target's [port] must be quoted there.
_BRACKETED = re.compile(r"[^\s\[\]{},:\"']+\[[^\]\s]*\]")
# characters: a longer line is no hand-written step (and the searches, quadratic in the
# worst case, stay cheap)
_HINT_LINE_MAX = 1000
_FLOW_VALUE = re.compile(r"(?P<key>[\w-]+):[ \t]+(?P<value>[^\s\"'{}\[,][^,{}]*?\])\s*(?=[,}]|$)")


def _with_quoting_hint(e: InputError, text: str) -> InputError:
    """``e`` (YAML refused the text), with how to quote a bracketed target when one on
    the line it names is the cause."""
    p = e.problems[0]
    line = p.where.rpartition(":")[2]
    if not p.what.startswith("not valid YAML") or not line.isdigit():
        return e
    lines = text.splitlines()
    row = lines[int(line) - 1] if 0 < int(line) <= len(lines) else ""
    if len(row) > _HINT_LINE_MAX or not _BRACKETED.search(row):
        return e
    m = _FLOW_VALUE.search(row)
    if m:
        value = m.group("value").strip()
        hint = (
            f"inside {{...}} YAML reads '[' as the start of a list: quote the value, "
            f"{m.group('key')}: {_double_quoted(value)} (one key a line, "
            f"{m.group('key')}: {value} needs no quotes)"
        )
    else:
        bracketed = _BRACKETED.search(row).group(0)  # type: ignore[union-attr]
        hint = (
            f"inside [...] YAML reads '[' as the start of a list: quote it, "
            f"{_double_quoted(bracketed)}"
        )
    return InputError([Problem(p.where, f"{p.what}: {hint}")])


def _double_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


FILE_MAX = 512 * 1024  # bytes of a scenario file


def read_file(path) -> str:
    """A scenario file's text (:func:`fabriclab.inputs.read_text`: a regular file of at
    most FILE_MAX bytes of UTF-8, or one error line)."""
    return inputs.read_text(str(path), FILE_MAX, "a scenario")
