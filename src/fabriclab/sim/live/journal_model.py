"""The journal's document as a model (pydantic, strict types, no key it does not know):
what ``up --resume`` reads is checked whole, field by field, before anything of it is
brought back, and the first problem is one line naming the field (``faults.0.since:
Input should be a valid number``).

What the model cannot know (a fault's options on its target, a scenario step against
the fabric) is checked where it is restored (:mod:`.journal_doc`), by the checks a live
request goes through.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ...ib.transport import NCCL_RETRY_CNT, NCCL_TIMEOUT, RETRY_CNT_MAX, TIMEOUT_MAX
from .faults.options import KINDS
from .scenario import FAULT_VERBS, STEPS_MAX

YEARS = 20 * 365 * 86400.0  # seconds: far beyond any clock a fabric reaches
_U64 = (1 << 64) - 1

Seconds = Annotated[float, Field(ge=0, le=YEARS)]
Count = Annotated[int, Field(ge=0, le=_U64)]
Text = Annotated[str, StringConstraints(max_length=4096)]
Digits = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,12}$")]
PortKey = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}:[0-9]{1,3}$")]
Scalar = bool | int | float | Text | None
Option = Scalar | Annotated[list[int | Text], Field(max_length=256)]
Options = Annotated[dict[Text, Option], Field(max_length=16)]
Tally = Annotated[dict[Text, Count], Field(max_length=256)]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class FlapProgress(_Model):
    """How far a flap has got."""

    flaps: Annotated[int, Field(ge=0, le=100000)]
    down: bool
    next: Seconds


class ErrorsProgress(_Model):
    """Recoveries an errors fault has counted towards its next down."""

    recoveries: Annotated[int, Field(ge=0, le=255)]


class NoProgress(_Model):
    """The other kinds keep no progress."""


class FaultDoc(_Model):
    """A fault as ``fault list`` shows it."""

    id: Annotated[int, Field(ge=1, le=2**31)]
    kind: Literal[KINDS]  # type: ignore[valid-type]
    target: Text
    options: Options
    since: Seconds
    progress: dict[str, Any] = {}

    def checked_progress(self) -> dict:
        """Its progress, checked for its kind (a ValidationError)."""
        models: dict[str, type[_Model]] = {"flap": FlapProgress, "errors": ErrorsProgress}
        model = models.get(self.kind, NoProgress)
        return model.model_validate(self.progress, strict=True).model_dump()


class EndDoc(_Model):
    """One receiving end of an errors fault (:class:`.faults.ber.EndState`)."""

    symbol_frac: Annotated[float, Field(ge=0, lt=1)] = 0.0
    packet_frac: Annotated[float, Field(ge=0, lt=1)] = 0.0
    symbols: Count = 0
    rcv_data: Count | None = None
    rcv_pkts: Count | None = None
    totals: Tally = {}


class StepDoc(_Model):
    """A scenario's step (:class:`.scenario.Step`)."""

    at: Seconds
    verb: Literal[(*FAULT_VERBS, "traffic")]  # type: ignore[valid-type]
    args: Annotated[list[Text], Field(max_length=16)]
    options: Options
    where: Text


class ScenarioDoc(_Model):
    """A scenario and how far it has run."""

    name: Text
    start: Seconds
    done: Annotated[int, Field(ge=0, le=STEPS_MAX)]
    steps: Annotated[list[StepDoc], Field(min_length=1, max_length=STEPS_MAX)]


class FlowDoc(_Model):
    """A running or retrying flow: its ends (``node:port``), what it has left, its rate
    limit, its queue pair's timeout and retry count."""

    id: Annotated[int, Field(ge=1)]
    src: PortKey
    dst: PortKey
    left: Annotated[int, Field(ge=0, lt=1 << 62)] | None  # 0: it had just ended
    limit: Annotated[float, Field(gt=0, lt=1e15)] | None
    # its queue pair's (journals written before they were kept: NCCL's)
    timeout: Annotated[int, Field(ge=0, le=TIMEOUT_MAX)] = NCCL_TIMEOUT
    retry_count: Annotated[int, Field(ge=0, le=RETRY_CNT_MAX)] = NCCL_RETRY_CNT


# running totals, PortCounters reset points, extended reset points, details and their
# reset points (:func:`.journal.counters_doc`)
CounterEntry = tuple[Tally, Tally, Tally, Tally, Tally]


class NetFlapDoc(_Model):
    """A flap of the other networks (:class:`...lan.faults.Flap`)."""

    target: Text
    period: Annotated[float, Field(gt=0, le=86400)]
    left: Annotated[int, Field(ge=1, le=100000)]
    down: bool
    next: Seconds


class NetDoc(_Model):
    """The other networks' faults (:meth:`...lan.faults.NetFaults.state`)."""

    down: Annotated[list[Text], Field(max_length=1 << 20)] = []
    rates: dict[Text, Annotated[int, Field(ge=8_000, le=10**12)]] = {}
    flaps: Annotated[list[NetFlapDoc], Field(max_length=1 << 20)] = []


class JournalDoc(_Model):
    """The whole journal (:func:`.journal_doc.snapshot`)."""

    version: Literal[1]
    meta: Annotated[dict[Text, Text | int | None], Field(max_length=16)]  # spec, trays
    clock: Seconds
    virtual: bool
    next_fault: Annotated[int, Field(ge=1, le=2**31)]
    faults: list[FaultDoc]
    ber: dict[Digits, dict[Digits, EndDoc]] = {}
    scenarios: list[ScenarioDoc] = []
    traffic: list[FlowDoc] = []
    counters: dict[PortKey, CounterEntry] = {}
    net: NetDoc | None = None


def problem(e: ValidationError, prefix: tuple = ()) -> str:
    """The first problem of a failed validation, one line: ``field.path: what``."""
    errors = e.errors(include_url=False, include_input=False, include_context=False)
    first = errors[0]
    where = ".".join(_part(p) for p in (*prefix, *first["loc"])) or "the document"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _part(p: Any) -> str:
    text = str(p)
    return text if len(text) <= 40 else text[:37] + "..."
