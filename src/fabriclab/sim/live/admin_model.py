"""The admin socket's requests as one pydantic model: a union on ``op`` of each
operation's fields, with strict types (``true`` is no id, ``"1e9"`` no count) and no
field nobody reads; a request that does not fit is one ``request`` error line naming the
field.  docs/protocol.md lists each operation's fields as :func:`fields` says them
(tests/test_protocol_doc.py checks it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ...errors import InputError, Problem


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


class FaultOptions(_Strict):
    """Every option of some kind of fault (which kind takes which, and their values, is
    :mod:`.faults.options`'s to check)."""

    period: float | str | None = None
    count: int | None = None
    width: str | None = None
    speed: str | None = None
    ber: float | None = None
    down_after: int | None = None
    rate: float | None = None
    seed: int | None = None
    gpus: str | list[int] | None = None

    def given(self) -> dict[str, Any]:
        """The options given (a null is an option not given)."""
        return self.model_dump(exclude_none=True)


class TrafficOptions(_Strict):
    """Every option of some traffic verb: how much and how fast a flow goes, its queue
    pair's attributes, and ``list``'s filters (which verb takes which is
    :mod:`.traffic.commands`'s to check)."""

    bytes: int | str | None = None
    rate: float | str | None = None
    timeout: int | None = None
    retry_count: int | None = None
    state: str | None = None
    from_: str | None = Field(None, alias="from")
    to: str | None = None
    id: int | None = None
    limit: int | None = None

    def given(self) -> dict[str, Any]:
        """The options given, by their names in the request."""
        return self.model_dump(exclude_none=True, by_alias=True)


class Clock(_Strict):
    op: Literal["clock"]


class Advance(_Strict):
    op: Literal["advance"]
    seconds: float | str


class Traffic(_Strict):
    op: Literal["traffic"]
    verb: str
    args: list[str] = []
    options: TrafficOptions = TrafficOptions()


class Fault(_Strict):
    op: Literal["fault"]
    kind: str
    target: str
    options: FaultOptions = FaultOptions()


class Faults(_Strict):
    op: Literal["faults"]


class Clear(_Strict):
    op: Literal["clear"]
    id: int | None = None


class Scenario(_Strict):
    op: Literal["scenario"]
    text: str
    source: str = "scenario"


class Scenarios(_Strict):
    op: Literal["scenarios"]


class NvidiaSmi(_Strict):
    op: Literal["nvidia-smi"]
    tray: str
    args: list[str] = []


class Tray(_Strict):
    op: Literal["tray"]
    host: str


class Locate(_Strict):
    op: Literal["locate"]
    name: str


class TopologyInputs(_Strict):
    op: Literal["topology-inputs"]
    from_: str | None = Field(None, alias="from")


class Stats(_Strict):
    op: Literal["stats"]


class Watch(_Strict):
    op: Literal["watch"]
    part: Literal["layout", "state"]


class Event(_Strict):
    op: Literal["event"]
    event_type: int = Field(ge=1, le=99999)
    name: str = Field(min_length=1, max_length=200)
    severity: Literal["Info", "Warning", "Minor", "Major", "Critical"]
    category: str = Field("External", min_length=1, max_length=100)
    object_name: str = Field("", max_length=200)
    description: str = Field("", max_length=4000)


class Net(_Strict):
    op: Literal["net"]
    target: str = Field("", max_length=1000)  # none only with "list"
    action: Literal["down", "up", "flap", "rate", "netem", "list"]
    rate: str | None = Field(None, max_length=40)  # none with "rate": lift the cap
    delay_ms: float | None = Field(None, ge=0, le=60_000)
    loss_pct: float | None = Field(None, ge=0, le=100)
    period: float | str = 2.0  # a flap's (a duration: checked where it is used)
    count: int = 1


class Collective(_Strict):
    op: Literal["collective"]
    collective: str
    sizes: list[Annotated[int, Field(ge=0, le=1 << 50)]] = Field(min_length=1, max_length=64)
    nodes: str = Field(min_length=1, max_length=100000)
    gpus_per_node: int | None = Field(None, ge=1, le=64)
    algo: str = "auto"
    proto: str = "auto"
    env: dict[str, str] = {}
    links: bool = False
    apply: int = Field(0, ge=0, le=1 << 20)  # times each size runs, its bytes put on the fabric


Request = Annotated[
    Clock
    | Advance
    | Traffic
    | Fault
    | Faults
    | Clear
    | Scenario
    | Scenarios
    | NvidiaSmi
    | Tray
    | Locate
    | TopologyInputs
    | Stats
    | Watch
    | Event
    | Collective
    | Net,
    Field(discriminator="op"),
]
_REQUEST: TypeAdapter[Request] = TypeAdapter(Request)
MODELS: tuple[type[_Strict], ...] = get_args(get_args(Request)[0])
# each operation's name (its ``op``) and model
OPS: dict[str, type[_Strict]] = {get_args(m.model_fields["op"].annotation)[0]: m for m in MODELS}

# pydantic's error types, said as what was wanted
_WANT = {
    "int_type": "an integer",
    "float_type": "a number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "bool_type": "a boolean",
}


def parse(req: Any) -> Request:
    """Request ``req`` (a JSON value) as its operation's model; an InputError (where
    ``request``) naming the operation or the first field that does not fit."""
    if not isinstance(req, dict):
        raise _bad("want a JSON object")
    if "op" not in req:
        raise _bad("op: missing")
    op = req["op"]
    if not isinstance(op, str) or op not in OPS:
        shown = repr(op[:40] if isinstance(op, str) else op)
        raise _bad(f"unknown operation {shown[:60]}")
    try:
        return _REQUEST.validate_python(req)
    except ValidationError as e:
        raise _bad(_say(e)) from None


def fields(op: str) -> dict[str, tuple[str, bool]]:
    """Operation ``op``'s fields besides ``op``: each one's JSON kinds (``"number or
    string"``) and whether it is required."""
    schema = OPS[op].model_json_schema(by_alias=True)
    required = set(schema.get("required", ()))
    return {
        name: (kinds_of(prop), name in required)
        for name, prop in schema["properties"].items()
        if name != "op"
    }


def kinds_of(prop: dict) -> str:
    """The JSON kinds a field's schema takes, as docs/protocol.md says them (``number or
    string``, ``list of strings``; null left out)."""
    return " or ".join(_kind(p) for p in prop.get("anyOf", [prop]) if p.get("type") != "null")


def _kind(prop: dict) -> str:
    t = prop.get("type")
    if t is None:  # a model of its own: an object
        return "object"
    if t == "array":
        return f"list of {_kind(prop['items'])}s"
    return str(t)


def _bad(what: str) -> InputError:
    return InputError([Problem("request", what)])


def _say(e: ValidationError) -> str:
    """The first field of ``e`` that does not fit, and what it should be: ``options.count:
    want an integer`` (one line; the kinds of a union joined by ``or``)."""
    errors = e.errors(include_url=False, include_input=False, include_context=False)
    # loc[0]: the op's tag; an unknown field is named as it came, whatever its name
    located = [(_where(err["loc"][1:], err["type"] != "extra_forbidden"), err) for err in errors]
    where, first = located[0]
    if first["type"] == "missing":
        return f"{where}: missing"
    if first["type"] == "extra_forbidden":
        return f"{where}: unknown field"
    wants = []
    for w, err in located:
        want = _WANT.get(err["type"])
        if w == where and want is not None and want not in wants:
            wants.append(want)
    if not wants:
        return f"{where}: {first['msg'][:1].lower()}{first['msg'][1:]}"
    return f"{where}: want {' or '.join(wants)}"


def _where(loc: tuple, union: bool = True) -> str:
    """A pydantic location as a path: ``options.count``, ``args[1]`` (the members of a
    union, ``int`` or ``list[int]``, left out; an odd key shown quoted and cut short)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif union and (part in ("int", "str", "float", "bool") or "[" in part):
            continue
        else:
            name = part if part.replace("_", "").replace("-", "").isalnum() else repr(part)
            name = name if len(name) <= 40 else name[:37] + "..."
            out += f".{name}" if out else name
    return out
