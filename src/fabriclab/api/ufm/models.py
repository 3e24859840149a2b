"""The UFM API's request bodies (pydantic, every size bounded) and the shapes of its
answers as the OpenAPI document states them (the answers themselves are rendered by
:mod:`.records`; tests/test_api_fuzz.py checks the two agree)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

PortName = Annotated[str, Field(min_length=1, max_length=64)]
# within what the admin op ``event`` takes (sim/live/admin_model.py Event: name and
# object_name 200, description 4000, here with the type and source appended)
Text = Annotated[str, Field(max_length=3000)]
Short = Annotated[str, Field(max_length=200)]


class Body(BaseModel):
    """A request body: fields UFM's clients send that fabriclab does not use are ignored."""

    model_config = ConfigDict(extra="ignore")


class UnhealthyPorts(Body):
    """``PUT app/unhealthy_ports`` (ufm_sdk_3.0 pdr_deterministic_plugin
    ``ufm_communication_mgr.py`` isolate_port / deisolate_port)."""

    ports: Annotated[list[PortName], Field(min_length=1, max_length=4096)]
    ports_policy: Literal["UNHEALTHY", "HEALTHY"]
    action: Literal["isolate", "no_discover"] | None = None


class ExternalEvent(Body):
    """``POST app/events/external_event`` (ufm_communication_mgr.py send_event)."""

    event_id: Literal[552, 553, 554]
    description: Text = ""
    external_event_name: Short = ""
    external_event_type: Short = ""
    external_event_source: Short = ""
    object_name: Short | None = None


class ActionParams(Body):
    port_id: PortName | None = None


class Action(Body):
    """``POST actions`` (ufm_communication_mgr.py reset_port)."""

    action: Annotated[str, Field(min_length=1, max_length=64)]
    params: ActionParams = ActionParams()
    object_ids: Annotated[list[Short], Field(max_length=4096)] = []
    object_type: Short = ""
    description: Text = ""
    identifier: Short = ""


# ---- answers (for the OpenAPI document) ----


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Error(BaseModel):
    error: str


class Version(Open):
    ufm_release_version: str


class Token(Open):
    access_token: str
    revoked: bool
    issued_at: str
    expires_in: int
    username: str


class Port(Open):
    name: str
    guid: str
    systemID: str
    system_name: str
    number: int
    external_number: int
    dname: str
    description: str
    physical_state: str
    logical_state: str
    active_speed: str
    active_width: str
    lid: int
    severity: str
    tier: int
    peer: str
    peer_node_name: str
    capabilities: list[str]


class Link(BaseModel):
    source_guid: str
    source_port: str
    destination_guid: str
    destination_port: str
    source_port_dname: str
    source_port_name: str
    destination_port_dname: str
    destination_port_name: str
    width: str
    severity: str
    source_port_node_description: str
    destination_port_node_description: str
    name: str
    capabilities: list[str]


class LinkPage(Open):
    data: list[Link]
    page_number: int
    rpp: int
    total: int


class System(Open):
    guid: str
    name: str
    system_name: str
    type: str
    severity: str


class Event(Open):
    id: int
    name: str
    type: str
    event_type: str
    severity: str
    timestamp: str
    category: str
    object_name: str
    description: str


class Logged(Open):
    """An external event's answer: the event as logged, or, when a burst of like events
    is being coalesced (docs/live.md "Coalesced bursts"), ``held`` and its name."""

    name: str
    object_name: str
    id: int | None = None
    held: bool = False


class Alarm(Open):
    id: int
    name: str
    type: int
    event_type: int
    event_count: int
    severity: str
    timestamp: str
    related_object_name: str
    reason: str
    duration: float


class Unhealthy(Open):
    UnhealthyPort: str
    UnhealthyGUID: str
    PeerGUID: str
    PeerPortDname: str
    State: str


class HealthChange(Open):
    ports: list[str]
    ports_policy: str


class Job(Open):
    ID: str
    Status: str
    Operation: str
    Progress: int
