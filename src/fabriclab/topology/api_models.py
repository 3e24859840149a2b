"""The topology API's request body as pydantic models: what ``/v1/generate`` and
``/v1/lookup`` accept, checked field by field, and described in the OpenAPI document.

The shape is topograph's ``topology.Request`` (pkg/topology/request.go): ``provider``
{name, creds, params}, ``engine`` {name, params}, ``nodes`` [{region, instances}].  As
Go's ``json.Unmarshal`` does, keys nobody reads are ignored, ``null`` leaves a field at
its default, and a value of the wrong type is refused, with no conversion (``"2"`` is no
integer, ``0`` no boolean; topograph: 400 "failed to parse payload").  The params are
typed here where topograph's engines and providers read them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from .providers.simulation_model import SIM_PROVIDERS

LOCAL_PROVIDERS = ("infiniband-bm", "infiniband-k8s", "fabriclab")
PROVIDERS = tuple(sorted(set(LOCAL_PROVIDERS) | SIM_PROVIDERS | {"test", "dra"}))
ENGINES = ("k8s", "kueue", "kwok", "slurm")


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# An integer as JSON Schema has it: 2.0 is one (Go's json refuses it; this is laxer).
Integer = Annotated[int, BeforeValidator(_integral)]


def _schema(schema: dict[str, Any], cls: type) -> None:
    """Say in the JSON schema what is accepted: null for every field (``_null_is_default``)
    but those the server's own checks require (``schema_required``, refused with topograph's
    messages: "no provider given for topology request", ...)."""
    required = getattr(cls, "schema_required", ())
    if required:
        schema["required"] = list(required)
    for name, prop in schema.get("properties", {}).items():
        if name in required:
            prop.pop("default", None)
            continue
        if {"type": "null"} in prop.get("anyOf", []):
            continue
        meta = {k: prop.pop(k) for k in ("title", "description", "default") if k in prop}
        schema["properties"][name] = {"anyOf": [prop, {"type": "null"}], **meta}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=_schema)

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not (v is None and k in cls.model_fields)}
        return data


class BlockNameParams(_Body):
    """Rename blocks from their nodes' names (topograph's ``blockName``)."""

    nodeNameRegexp: str = ""
    format: str = ""


class TopologyParams(_Body):
    """One of Slurm's named topologies (``topology.yaml``)."""

    plugin: str = ""
    nodes: list[str] = []
    blockSizes: list[Integer] = []
    blockName: BlockNameParams | None = None
    clusterDefault: bool = False


class EngineParams(_Body):
    """The slurm engine's params; the other engines take none."""

    plugin: str = Field("", description="topology/tree (default), topology/block or topology/flat")
    blockSizes: list[Integer] = []
    blockName: BlockNameParams | None = None
    topologies: dict[str, TopologyParams] = {}
    skeletonOnly: bool = False


class ProviderParams(_Body):
    """The simulation providers' params (the others ignore theirs)."""

    modelFileName: str = Field("", description="a model file in the server's --models-dir")
    trimTiers: Integer = 0


class Provider(_Body):
    """Which provider answers, and its params."""

    schema_required: ClassVar[tuple[str, ...]] = ("name",)
    name: str = Field("", json_schema_extra={"enum": list(PROVIDERS)})
    creds: dict[str, str] = {}
    params: ProviderParams = ProviderParams()


class Engine(_Body):
    """Which engine writes the answer, and its params."""

    schema_required: ClassVar[tuple[str, ...]] = ("name",)
    name: str = Field("", json_schema_extra={"enum": list(ENGINES)})
    params: EngineParams = EngineParams()


class ComputeInstances(_Body):
    """One region's instances and the node names they go by."""

    region: str = ""
    instances: dict[str, str] = Field({}, description="instance id -> node name")


class TopologyRequest(_Body):
    """A topology request (topograph's ``topology.Request``)."""

    schema_required: ClassVar[tuple[str, ...]] = ("provider", "engine")

    provider: Provider = Provider()
    engine: Engine = Engine()
    nodes: list[ComputeInstances] = []


def problem(e: ValidationError) -> str:
    """The first problem of a failed validation, as ``field.path: what``."""
    errors = e.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(_loc(p) for p in first["loc"]) or "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _loc(part: Any) -> str:
    text = str(part)
    if len(text) > 40:
        text = text[:37] + "..."
    return text
