"""A topograph-compatible topology API, so tools written for topograph (the seed lab's
update-topology script, Slinky, node observers) can point at fabriclab instead.

- ``POST /v1/generate`` with ``{"provider": {"name", "params"}, "engine": {"name",
  "params"}, "nodes": [{"region", "instances": {id: name}}]}`` answers 202 and the
  request id; the request runs after ``aggregation_delay`` (a repeat of the same request
  within it replaces the pending one, as topograph's trailing-delay queue does).
- ``GET /v1/topology?uid=`` answers 200 with the result, 202 while pending, 404
  ``request ID <uid> not found``, or the request's own error status.
- ``POST /v1/lookup`` answers with the stored result of the same request.
- ``GET /healthz`` answers ``OK``.

Providers: ``infiniband-bm`` / ``infiniband-k8s`` / ``fabriclab`` read the source the
server was started with (a spec, or ibnetdiscover + nvidia-smi files); ``test`` and the
``*-sim`` providers read topograph simulation models from ``models_dir``.  Engines:
``slurm`` (params ``plugin``, ``blockSizes``, ``blockName``, ``topologies``, ``trimTiers``
via the provider), ``k8s`` (the node labels as JSON), plus fabriclab's ``kueue`` and
``kwok``.

Every answer is one line or a result, never a 500 for anything a request holds: request
bodies are bounded (request_body), checked against the request models (api_models), and
run on a bounded queue (request_queue); every error the engines and providers raise is a
TopologyProblem with its status.  With a token, every path but /healthz needs
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import PlainTextResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from . import api_models, request_body
from .api_models import LOCAL_PROVIDERS, PROVIDERS, EngineParams, ProviderParams, TopologyRequest
from .engines import EngineOptions, run
from .engines.slurm import BlockName, TopologySpec
from .errors import RequestError, TopologyProblem
from .fnv import fnv1a64
from .graph import Graph
from .options import block_name, validate_block_sizes
from .providers.simulation_model import SimulationModel
from .request_queue import RequestQueue, Result
from .topograph_test_graphs import tree_test_set

log = logging.getLogger("fabriclab.topology")

MAX_MESSAGE = 500  # characters of an error message answered
# control characters, and what str.splitlines also takes for a line break
_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def request_id(body: dict) -> str:
    """FNV-1a-64 of the request without its nodes and credentials: one id per question,
    so repeated requests share a result (topograph's ``Request.Hash``).  ``body`` has
    passed TopologyRequest, so its provider and engine are objects or null."""
    prov, eng = body.get("provider") or {}, body.get("engine") or {}
    key = {
        "provider": {"name": prov.get("name") or "", "params": prov.get("params") or {}},
        "engine": {"name": eng.get("name") or "", "params": eng.get("params") or {}},
    }
    return f"{fnv1a64(json.dumps(key, sort_keys=True, separators=(',', ':')).encode()):x}"


def one_line(text: str) -> str:
    """An answer's message as one line of bounded length (it may quote what the request
    held: node names, dictionary keys)."""
    text = _LINE_BREAKING.sub(lambda m: repr(m.group())[1:-1], text)
    if len(text) <= MAX_MESSAGE:
        return text
    half = (MAX_MESSAGE - 3) // 2  # what was quoted is shortened, both ends stay
    return text[:half] + "..." + text[-half:]


class TopologyService:
    """The API's work: requests parsed and checked, queued, and run against the local
    fabric (``local``: requested nodes -> graph and GPUs per host) or a simulation model
    of ``models_dir``."""

    def __init__(
        self,
        local: Callable[[list[str] | None], tuple[Graph, dict[str, int]]] | None = None,
        models_dir: str | None = None,
        aggregation_delay: float = 2.0,
        **queue_bounds: Any,
    ):
        self.local = local
        self.models_dir = Path(models_dir) if models_dir else None
        self.queue = RequestQueue(self._run, aggregation_delay, **queue_bounds)

    # --- requests -------------------------------------------------------------------
    def parse(self, body: bytes) -> tuple[dict, TopologyRequest]:
        """The request in a body: bounded JSON (413/422), a valid request (400)."""
        raw = request_body.parse(body)
        if not isinstance(raw, dict):
            raise RequestError("request body must be a JSON object")
        try:
            req = TopologyRequest.model_validate(raw)
        except ValidationError as e:
            raise RequestError(f"invalid request: {api_models.problem(e)}") from None
        self.validate(req)
        return raw, req

    @staticmethod
    def validate(req: TopologyRequest) -> None:
        """topograph's own checks and messages (pkg/server/http_server.go ``validate``)."""
        prov, eng = req.provider.name, req.engine.name
        if not prov:
            raise RequestError("no provider given for topology request")
        if prov not in PROVIDERS:
            raise RequestError(f"unsupported provider {prov}")
        if not eng:
            raise RequestError("no engine given for topology request")
        if eng not in api_models.ENGINES:
            raise RequestError(f"unsupported engine {eng}")

    def submit(self, body: bytes) -> str:
        """Queue the request in ``body``; its id."""
        raw, req = self.parse(body)
        uid = request_id(raw)
        self.queue.submit(uid, req, len(body))
        return uid

    def lookup(self, body: bytes) -> Result:
        """The result of the request in ``body`` (as ``get`` of its id)."""
        raw, _ = self.parse(body)
        return self.get(request_id(raw))

    def get(self, uid: str) -> Result:
        """The result of request ``uid``, 202 while it waits or runs, 404 if unknown."""
        return self.queue.get(uid) or Result(404, f"request ID {uid} not found")

    def close(self) -> None:
        """Stop the queue."""
        self.queue.close()

    def _run(self, req: TopologyRequest) -> Result:
        try:
            return Result(200, data=self.generate(req).encode())
        except TopologyProblem as e:  # every error a request can cause, with its status
            return Result(e.status, str(e))
        except Exception as e:  # a bug, never a request's fault: say so rather than stay pending
            log.exception("topology request failed")
            return Result(500, f"internal error: {type(e).__name__}: {e}")

    # --- generation ------------------------------------------------------------------
    def generate(self, req: TopologyRequest) -> str:
        """A request's answer: its provider's graph through its engine."""
        prov = req.provider.name
        instance_nodes: dict[str, str] = {}
        for compute in req.nodes:
            instance_nodes.update(compute.instances)
        gpus: dict[str, int] = {}
        if prov in LOCAL_PROVIDERS:
            if self.local is None:
                raise RequestError(f"provider {prov}: this server was started without a fabric")
            names = sorted(set(instance_nodes.values())) if instance_nodes else None
            graph, gpus = self.local(names)
        else:
            graph = self._model_graph(prov, req.provider.params, instance_nodes)
        return self._engine(req.engine.name, req.engine.params, graph, gpus)

    def _model_graph(
        self, prov: str, params: ProviderParams, instance_nodes: dict[str, str]
    ) -> Graph:
        name = params.modelFileName
        if prov == "test" and not name:
            return tree_test_set()
        if not name:
            raise RequestError("no model file name for simulation")
        if self.models_dir is None:
            raise RequestError("this server has no models directory (--models-dir)")
        base = Path(name).name  # a model of the models directory, whatever path was given
        if base in ("", ".", "..") or "\x00" in name:
            raise RequestError(f"modelFileName {name!r} is not a file name")
        path = self.models_dir / base
        if not path.is_file():
            raise RequestError(f"no model file {base} in the models directory")
        model = SimulationModel.load(path)
        if prov == "test":
            return model.test_graph()
        if prov == "dra":
            return model.dra_graph()
        return model.sim_graph(prov, instance_nodes or None, params.trimTiers)

    def _engine(self, eng: str, params: EngineParams, graph: Graph, gpus: dict[str, int]) -> str:
        """The API's engines (``slurm`` with its params, ``k8s``, ``kueue``, ``kwok``) as
        the engines of ``topology``."""
        opts = EngineOptions(gpus=gpus)
        if eng == "slurm":
            validate_block_sizes(params.blockSizes)
            opts.block_sizes = list(params.blockSizes)
            opts.block_name = _block_name(params.blockName)
            for name, topology in params.topologies.items():
                validate_block_sizes(topology.blockSizes)
                opts.topologies[name] = TopologySpec(
                    topology.plugin,
                    list(topology.nodes),
                    list(topology.blockSizes),
                    _block_name(topology.blockName),
                    topology.clusterDefault,
                )
            opts.skeleton = params.skeletonOnly
            if opts.topologies:
                return run("slurm-yaml", graph, opts)
            return run(
                "slurm-block" if params.plugin == "topology/block" else "slurm-tree", graph, opts
            )
        if eng == "k8s":
            return run("k8s-labels", graph, opts)
        return run(eng, graph, opts)


def _block_name(params: api_models.BlockNameParams | None) -> BlockName | None:
    return block_name(params.nodeNameRegexp, params.format) if params else None


# --- HTTP ------------------------------------------------------------------------------
_TEXT = {"text/plain": {"schema": {"type": "string"}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A bad request (one line: what is wrong)", "content": _TEXT},
    413: {"description": "The body is over the server's limit", "content": _TEXT},
    422: {"description": "The JSON nests too deep or has too long a number", "content": _TEXT},
}
_RESULT: dict[int | str, dict[str, Any]] = {
    202: {"description": "Still pending", "content": _TEXT},
    404: {"description": "No such request, or its result was evicted", "content": _TEXT},
}
_UID = {
    "parameters": [
        {
            "name": "uid",
            "in": "query",
            "required": True,
            "schema": {"type": "string", "minLength": 1},
        }
    ]
}
_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/TopologyRequest"}}
        },
    }
}


def _text(body: str | bytes, status: int) -> PlainTextResponse:
    return PlainTextResponse(body, status_code=status)


def _answer(result: Result) -> PlainTextResponse:
    if result.status == 200:
        return _text(result.data or b"", 200)
    if result.status == 202:
        return _text(result.message, 202)
    return _text(f"{one_line(result.message)}\n", result.status)


class BearerAuth:
    """ASGI middleware: every path but /healthz needs ``Authorization: Bearer <token>``,
    checked before any of the body is read."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] != "/healthz":
            given = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, credentials = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credentials.strip(), self.token
            ):
                response = PlainTextResponse(
                    "missing or wrong bearer token\n",
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def make_app(
    service: TopologyService,
    *,
    token: str | None = None,
    max_body: int = request_body.MAX_BODY_BYTES,
) -> FastAPI:
    """The FastAPI app of ``service``: topograph's routes, bodies bounded by ``max_body``,
    a bearer token on every path but /healthz when ``token`` is given."""
    app = FastAPI(title="fabriclab topology API", docs_url=None, redoc_url=None)
    responses: dict[int | str, dict[str, Any]] = dict(_ERRORS)
    if token:
        responses[401] = {"description": "Missing or wrong bearer token", "content": _TEXT}
        app.add_middleware(BearerAuth, token=token)

    @app.exception_handler(TopologyProblem)
    async def refused(_req: Request, e: TopologyProblem):
        return _text(f"{one_line(str(e))}\n", e.status)

    @app.exception_handler(ClientDisconnect)
    async def gone(_req: Request, _e: ClientDisconnect):
        return _text("client disconnected\n", 400)  # nobody reads it

    async def body_of(req: Request) -> bytes:
        return await request_body.read(req.stream(), req.headers.get("content-length"), max_body)

    @app.get("/healthz", response_class=PlainTextResponse)
    def healthz():
        return _text("OK\n", 200)

    @app.post(
        "/v1/generate",
        response_class=PlainTextResponse,
        status_code=202,
        openapi_extra=_BODY,
        responses={
            202: {"description": "The request id", "content": _TEXT},
            429: {"description": "Too many requests waiting", "content": _TEXT},
            **responses,
        },
    )
    async def generate(req: Request):
        return _text(await run_in_threadpool(service.submit, await body_of(req)), 202)

    @app.get(
        "/v1/topology",
        response_class=PlainTextResponse,
        openapi_extra=_UID,
        responses={
            200: {"description": "The result", "content": _TEXT},
            **_RESULT,
            400: _ERRORS[400],
            **({401: responses[401]} if token else {}),
            502: {"description": "The request's own error status (as topograph)", "content": _TEXT},
        },
    )
    def topology(req: Request):
        uid = req.query_params.get("uid", "")
        if not uid:
            return _text("must specify request uid\n", 400)
        return _answer(service.get(uid))

    @app.post(
        "/v1/lookup",
        response_class=PlainTextResponse,
        openapi_extra=_BODY,
        responses={200: {"description": "The result", "content": _TEXT}, **_RESULT, **responses},
    )
    async def lookup(req: Request):
        return _answer(await run_in_threadpool(service.lookup, await body_of(req)))

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            models = TopologyRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(models.pop("$defs", {}))
            components["TopologyRequest"] = models
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override
    return app


def is_loopback(host: str) -> bool:
    """True if every address ``host`` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos
    )


def serve(service: TopologyService, host: str, port: int, token: str | None = None) -> None:
    """Run the app with uvicorn until interrupted, then stop the service."""
    import uvicorn

    try:
        uvicorn.run(make_app(service, token=token), host=host, port=port, log_level="warning")
    finally:
        service.close()
