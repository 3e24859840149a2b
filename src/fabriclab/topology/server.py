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
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from ..errors import FabriclabError
from .engines import EngineOptions, run
from .engines.slurm import BlockName, TopologyError, TopologySpec
from .graph import Graph
from .providers.infiniband import ProviderError
from .providers.topograph_model import SIM_PROVIDERS, Model, ModelError

LOCAL_PROVIDERS = {"infiniband-bm", "infiniband-k8s", "fabriclab"}
ENGINES = {"slurm", "k8s", "kueue", "kwok"}


class RequestError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class _Entry:
    status: int
    message: str
    result: bytes | None = None


def request_id(body: dict) -> str:
    """FNV-1a-64 of the request without its nodes and credentials: one id per question,
    so repeated requests share a result (topograph's request hash)."""
    key = {"provider": {"name": body.get("provider", {}).get("name", ""),
                        "params": body.get("provider", {}).get("params") or {}},
           "engine": {"name": body.get("engine", {}).get("name", ""),
                      "params": body.get("engine", {}).get("params") or {}}}
    data = json.dumps(key, sort_keys=True, separators=(",", ":")).encode()
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:x}"


class TopologyService:
    def __init__(self, local: Callable[[list[str] | None], tuple[Graph, dict[str, int]]] | None = None,
                 models_dir: str | None = None, aggregation_delay: float = 2.0):
        self.local = local
        self.models_dir = Path(models_dir) if models_dir else None
        self.delay = aggregation_delay
        self.store: dict[str, _Entry] = {}
        self.timers: dict[str, threading.Timer] = {}
        self.lock = threading.Lock()

    # --- queue ----------------------------------------------------------------------
    def submit(self, body: dict) -> str:
        self.validate(body)
        uid = request_id(body)
        entry = _Entry(202, f"request ID {uid} has been created")
        with self.lock:
            if uid in self.timers:
                self.timers[uid].cancel()
            timer = threading.Timer(self.delay, self._process, (uid, body, entry))
            timer.daemon = True
            self.timers[uid] = timer
            self.store[uid] = entry
        timer.start()
        return uid

    def _process(self, uid: str, body: dict, entry: _Entry) -> None:
        try:
            data = self.generate(body).encode()
            status, message = 200, ""
        except RequestError as e:
            data, status, message = None, e.status, str(e)
        except (FabriclabError, TopologyError, ProviderError, ModelError) as e:
            data, status, message = None, getattr(e, "status", 400), str(e)
        except Exception as e:  # a bug: answer 500 rather than leave the request pending
            data, status, message = None, 500, f"internal error: {type(e).__name__}: {e}"
        with self.lock:
            if self.store.get(uid) is entry:
                entry.status, entry.message, entry.result = status, message, data
            self.timers.pop(uid, None)

    def get(self, uid: str) -> _Entry:
        with self.lock:
            e = self.store.get(uid)
            return _Entry(e.status, e.message, e.result) if e else _Entry(404, f"request ID {uid} not found")

    # --- requests -------------------------------------------------------------------
    def validate(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        prov = (body.get("provider") or {}).get("name", "")
        eng = (body.get("engine") or {}).get("name", "")
        if not prov:
            raise RequestError("no provider given for topology request")
        if prov not in LOCAL_PROVIDERS | SIM_PROVIDERS | {"test", "dra"}:
            raise RequestError(f"unsupported provider {prov}")
        if not eng:
            raise RequestError("no engine given for topology request")
        if eng not in ENGINES:
            raise RequestError(f"unsupported engine {eng}")

    def generate(self, body: dict) -> str:
        prov = body["provider"]["name"]
        pparams = body["provider"].get("params") or {}
        eng = body["engine"]["name"]
        eparams = dict(body["engine"].get("params") or {})
        i2n: dict[str, str] = {}
        for ci in body.get("nodes") or []:
            i2n.update(ci.get("instances") or {})
        gpus: dict[str, int] = {}
        if prov in LOCAL_PROVIDERS:
            if self.local is None:
                raise RequestError(f"provider {prov}: this server was started without a fabric", 400)
            names = sorted(set(i2n.values())) if i2n else None
            graph, gpus = self.local(names)
        else:
            graph = self._model_graph(prov, pparams, i2n)
        return self._engine(eng, eparams, graph, gpus)

    def _model_graph(self, prov: str, params: dict, i2n: dict[str, str]) -> Graph:
        name = params.get("modelFileName")
        if prov == "test" and not name:
            from . import testsets

            return testsets.tree_test_set()
        if not name:
            raise RequestError("no model file name for simulation")
        if self.models_dir is None:
            raise RequestError("this server has no models directory (--models-dir)")
        path = self.models_dir / Path(str(name)).name
        model = Model.load(path)
        if prov == "test":
            return model.test_graph()
        if prov == "dra":
            return model.dra_graph()
        return model.sim_graph(prov, i2n or None, int(params.get("trimTiers", 0) or 0))

    def _engine(self, eng: str, params: dict, graph: Graph, gpus: dict[str, int]) -> str:
        opts = EngineOptions(gpus=gpus)
        if eng == "slurm":
            plugin = params.get("plugin") or ""
            sizes = [int(x) for x in params.get("blockSizes") or []]
            from .cli_support import validate_block_sizes

            try:
                validate_block_sizes(sizes, "blockSizes")
            except FabriclabError as e:
                raise RequestError(e.problems[0].what) from None
            bn = params.get("blockName")
            opts.block_sizes = sizes
            opts.block_name = BlockName(bn.get("nodeNameRegexp", ""), bn.get("format", "")) if bn else None
            for tname, t in (params.get("topologies") or {}).items():
                tbn = t.get("blockName")
                opts.topologies[tname] = TopologySpec(
                    t.get("plugin", ""), list(t.get("nodes") or []), [int(x) for x in t.get("blockSizes") or []],
                    BlockName(tbn.get("nodeNameRegexp", ""), tbn.get("format", "")) if tbn else None,
                    bool(t.get("clusterDefault", False)))
            opts.skeleton = bool(params.get("skeletonOnly", False))
            if opts.topologies:
                return run("slurm-yaml", graph, opts)
            return run("slurm-block" if plugin == "topology/block" else "slurm-tree", graph, opts)
        if eng == "k8s":
            return run("k8s-labels", graph, opts)
        return run(eng, graph, opts)


def make_app(service: TopologyService) -> FastAPI:
    app = FastAPI(title="fabriclab topology API", docs_url=None, redoc_url=None)

    def text(body: str, status: int) -> PlainTextResponse:
        return PlainTextResponse(body, status_code=status)

    @app.get("/healthz")
    def healthz():
        return text("OK\n", 200)

    async def body_of(req: Request) -> dict:
        try:
            return json.loads(await req.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"invalid JSON: {e}") from None

    @app.post("/v1/generate")
    async def generate(req: Request):
        try:
            uid = service.submit(await body_of(req))
        except RequestError as e:
            return text(f"{e}\n", e.status)
        return text(uid, 202)

    def answer(uid: str):
        e = service.get(uid)
        if e.status == 200:
            return PlainTextResponse(e.result or b"", status_code=200)
        if e.status == 202:
            return text(e.message, 202)
        return text(f"{e.message}\n", e.status)

    @app.get("/v1/topology")
    def topology(uid: str = ""):
        if not uid:
            return text("must specify request uid\n", 400)
        return answer(uid)

    @app.post("/v1/lookup")
    async def lookup(req: Request):
        try:
            body = await body_of(req)
            service.validate(body)
        except RequestError as e:
            return text(f"{e}\n", e.status)
        return answer(request_id(body))

    return app


def serve(service: TopologyService, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(make_app(service), host=host, port=port, log_level="warning")
