"""The topology API under hostile or careless clients: a real ``fabriclab serve-topology``
spoken to over HTTP (and raw sockets), the request queue on its own, and the app fuzzed
from its own OpenAPI document with schemathesis.  No request may cause a 500."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import schemathesis
from conftest import FIXTURES
from helpers import TopologyServer, copy_models, free_port, topology_result, wait_for
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from fabriclab.topology import server

# The limit, written out so that this file runs against older code too (each test must
# fail there); test_limit_is_the_documented_one ties it to MAX_BODY.
MAX_BODY = 4 * 1024 * 1024

TOPO = FIXTURES / "topograph"
TOKEN = "s3cret-topology-token-for-tests"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    models = copy_models(TOPO, tmp_path_factory.mktemp("models"))
    s = TopologyServer(
        tmp, "lab", "--models-dir", str(models), "--aggregation-delay", "0.05"
    ).wait_ready()
    yield s
    s.stop()


def one_line_error(r: httpx.Response, status: int, fragment: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert fragment in r.text, r.text
    assert r.text.endswith("\n") and r.text.count("\n") == 1, repr(r.text)


# --- 1. malformed bodies answered 500 with a traceback --------------------------------

TRACEBACK_CASES = [
    ('{"provider": "x"}', 400, "provider"),
    ('{"provider": ["test"], "engine": {"name": "slurm"}}', 400, "provider"),
    ('{"provider": {"name": ["test"]}, "engine": {"name": "slurm"}}', 400, "provider.name"),
    ('{"provider": {"name": {"a": 1}}, "engine": {"name": "slurm"}}', 400, "provider.name"),
    ("[" * 5000 + "]" * 5000, 422, "nests deeper than 32"),
    ("1" * 5000, 422, "more than 100 digits"),
]


@pytest.mark.parametrize(
    "body,status,fragment",
    TRACEBACK_CASES,
    ids=["provider-string", "provider-list", "name-list", "name-object", "deep", "big-int"],
)
def test_malformed_bodies_are_4xx_not_500(srv, body, status, fragment):
    before = srv.log.read_text()
    for path in ("/v1/generate", "/v1/lookup"):
        one_line_error(httpx.post(srv.base + path, content=body), status, fragment)
    assert srv.log.read_text() == before  # nothing logged, no traceback


# --- 2. wrongly typed fields stored a 500 result ----------------------------------------


def _req(provider: dict | str | None = None, engine: dict | str | None = None, **extra) -> str:
    body = {
        "provider": {"name": "test"} if provider is None else provider,
        "engine": {"name": "slurm"} if engine is None else engine,
        **extra,
    }
    return json.dumps(body)


SLURM = "slurm"
TYPED_CASES = [
    (_req(nodes="abc"), "nodes"),
    (_req(nodes=["abc"]), "nodes.0"),
    (_req(nodes=[{"instances": ["a"]}]), "nodes.0.instances"),
    (_req(provider={"name": "test", "params": "abc"}), "provider.params"),
    (_req(engine={"name": SLURM, "params": "abc"}), "engine.params"),
    (_req(engine={"name": SLURM, "params": {"blockSizes": ["x"]}}), "engine.params.blockSizes.0"),
    (_req(engine={"name": SLURM, "params": {"blockName": "abc"}}), "engine.params.blockName"),
    (_req(engine={"name": SLURM, "params": {"topologies": ["abc"]}}), "engine.params.topologies"),
    (
        _req(engine={"name": SLURM, "params": {"topologies": {"t": "abc"}}}),
        "engine.params.topologies.t",
    ),
    (
        _req(
            engine={
                "name": SLURM,
                "params": {"topologies": {"t": {"plugin": "topology/block", "blockName": 7}}},
            }
        ),
        "engine.params.topologies.t.blockName",
    ),
    (
        _req(
            provider={
                "name": "aws-sim",
                "params": {"modelFileName": "small-tree.yaml", "trimTiers": "x"},
            }
        ),
        "provider.params.trimTiers",
    ),
]


@pytest.mark.parametrize("body,field", TYPED_CASES, ids=[f for _, f in TYPED_CASES])
def test_wrongly_typed_fields_are_refused_with_400(srv, body, field):
    """Refused when submitted (topograph: 400 "failed to parse payload"), naming the field;
    never a stored "internal error"."""
    r = httpx.post(f"{srv.base}/v1/generate", content=body)
    one_line_error(r, 400, f"invalid request: {field}: ")


def test_null_fields_take_their_defaults_as_in_go(srv):
    body = json.dumps(
        {
            "provider": {"name": "test", "params": None, "creds": None},
            "engine": {"name": "slurm", "params": {"blockSizes": None, "blockName": None}},
            "nodes": None,
        }
    )
    r = httpx.post(f"{srv.base}/v1/generate", content=body)
    assert r.status_code == 202, r.text
    assert topology_result(srv.base, r.text).status_code == 200


def test_a_model_file_name_is_a_file_of_the_models_directory(srv):
    for name, fragment in [
        ("..", "is not a file name"),
        ("a\u0000b", "is not a file name"),
        ("../../etc/passwd", "no model file passwd"),
    ]:
        body = _req(provider={"name": "aws-sim", "params": {"modelFileName": name}})
        uid = httpx.post(f"{srv.base}/v1/generate", content=body).text
        r = topology_result(srv.base, uid)
        one_line_error(r, 400, fragment)
        assert "/" not in r.text.replace("../../etc/passwd", "")  # no server path given away


def test_label_error_is_a_400(srv):
    """Two instances in different NVLink domains named as one node: the k8s engine
    cannot label it (LabelError was missing from the caught errors: 500)."""
    body = _req(
        provider={"name": "aws-sim", "params": {"modelFileName": "small-tree.yaml"}},
        engine={"name": "k8s"},
        nodes=[{"region": "r", "instances": {"I21": "n1", "I34": "n1"}}],
    )
    uid = httpx.post(f"{srv.base}/v1/generate", content=body).text
    one_line_error(topology_result(srv.base, uid), 400, "multiple accelerator labels")


def _block_request(regexp: str, fmt: str, names: dict[str, str]) -> str:
    return _req(
        provider={"name": "aws-sim", "params": {"modelFileName": "small-tree.yaml"}},
        engine={
            "name": "slurm",
            "params": {
                "plugin": "topology/block",
                "blockName": {"nodeNameRegexp": regexp, "format": fmt},
            },
        },
        nodes=[{"region": "r", "instances": names}],
    )


def test_block_name_regexp_matches_in_linear_time(srv):
    """A pattern that backtracks exponentially in Python's re ('^(a|aa)+$' on 60 a's and
    a '!' would take days) answers at once: patterns are RE2's, as Go's regexp."""
    body = _block_request("^(a|aa)+$", "x", {"I21": "a" * 60 + "!", "I22": "a" * 60 + "!"})
    started = time.monotonic()
    uid = httpx.post(f"{srv.base}/v1/generate", content=body).text
    one_line_error(topology_result(srv.base, uid), 400, "does not match nodeNameRegexp")
    assert time.monotonic() - started < 5
    body = _block_request("(a)\\1", "x", {"I21": "aa"})  # a back-reference: no RE2 (nor Go)
    uid = httpx.post(f"{srv.base}/v1/generate", content=body).text
    one_line_error(topology_result(srv.base, uid), 400, "invalid blockName.nodeNameRegexp")


def test_block_name_format_with_a_huge_group_number(srv):
    """'${999...}' (5,000 digits) is no group (Go: numbers have at most 9 digits), not a
    ValueError from int()."""
    body = _block_request("^(.*)$", "${" + "9" * 5000 + "}", {"I21": "n1", "I22": "n2"})
    uid = httpx.post(f"{srv.base}/v1/generate", content=body).text
    one_line_error(topology_result(srv.base, uid), 400, "produces an empty name")


def test_topology_node_lists_are_bounded_in_total(srv):
    """Each hostlist expands to at most 500,000 names, and now all of a request's lists
    together too: 1,000 times 'n[0-499999]' (14 kB) made 500 million names."""
    body = _req(
        engine={
            "name": "slurm",
            "params": {
                "topologies": {
                    "t": {"plugin": "topology/tree", "nodes": ["n[0-499999]"] * 3},
                    "u": {"plugin": "topology/tree", "nodes": ["m[0-499999]"] * 3},
                }
            },
        }
    )
    started = time.monotonic()
    uid = httpx.post(f"{srv.base}/v1/generate", content=body).text
    one_line_error(topology_result(srv.base, uid), 400, "expand to more than 500000 names")
    assert time.monotonic() - started < 8


def test_error_messages_are_one_line(srv):
    body = _req(provider={"name": "no\nsuch"})
    one_line_error(
        httpx.post(f"{srv.base}/v1/generate", content=body), 400, "unsupported provider no\\nsuch"
    )


# --- 3. no body size limit ------------------------------------------------------------


def _raw_request(port: int, head: bytes, body_chunks=(), timeout: float = 10) -> tuple[bytes, int]:
    """Send a request over a raw socket (stopping when the server closes), return the
    response's first bytes and how many body bytes could be sent."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        try:
            for chunk in body_chunks:
                s.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while True:
                data = s.recv(65536)
                answer += data
                head_end = answer.find(b"\r\n\r\n")
                if not data or (
                    head_end >= 0 and len(answer) >= head_end + 4 + _content_length(answer)
                ):
                    return answer, sent
        except ConnectionResetError:
            return answer, sent


def _content_length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def test_content_length_over_the_limit_is_413_before_reading(srv):
    """A declared 100 MB body is refused from its header alone: no byte of it sent."""
    head = (
        b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000000\r\n\r\n"
    )
    started = time.monotonic()
    answer, _ = _raw_request(srv.port, head)
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"over the limit of 4194304 bytes" in answer
    assert time.monotonic() - started < 5


def test_streamed_body_over_the_limit_is_413_and_memory_stays_flat(srv):
    """100 MB sent chunked (no Content-Length): counted while it streams, refused at the
    limit; the server's peak RSS does not grow with what the client tries to send."""
    hwm = srv.status("VmHWM")
    head = b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    answer, _sent = _raw_request(srv.port, head, (chunk for _ in range(100)))
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert (srv.status("VmHWM") - hwm) < 64 * 1024, "peak RSS grew by more than 64 MB"
    assert httpx.get(f"{srv.base}/healthz").status_code == 200


def test_a_body_at_the_limit_is_read(srv):
    body = _req()
    body = body[:-1] + ', "pad": "' + " " * (MAX_BODY - len(body) - 11) + '"}'
    assert len(body) == MAX_BODY
    r = httpx.post(f"{srv.base}/v1/generate", content=body)
    assert r.status_code == 202, r.text[:200]
    r = httpx.post(f"{srv.base}/v1/generate", content=body + " ")
    one_line_error(r, 413, "over the limit")


# --- 4. a thread per request, results never evicted ---------------------------------------


def test_3000_distinct_requests_use_a_bounded_pool_and_results_are_evicted(tmp_path):
    s = TopologyServer(tmp_path, "--aggregation-delay", "1").wait_ready()
    try:
        threads = []

        def one(i: int) -> str:
            body = _req(engine={"name": "slurm", "params": {"skeletonOnly": False, "n": i}})
            r = client.post(f"{s.base}/v1/generate", content=body)
            # 429 if more than 1,024 wait at once (a client faster than this machine's)
            assert r.status_code in (202, 429), r.text
            if i % 100 == 0:
                threads.append(s.status("Threads"))
            return r.text if r.status_code == 202 else ""

        with httpx.Client() as client, ThreadPoolExecutor(8) as pool:
            uids = [u for u in pool.map(one, range(3000)) if u]
        assert len(set(uids)) == len(uids) >= 1000
        assert max(threads) <= 50, threads  # was 1,294: one threading.Timer per request
        newest = topology_result(s.base, uids[-1])
        assert newest.status_code == 200, newest.text
        # at most 100 results are kept (topograph's RequestHistorySize): the first is gone
        # once the requests before the newest are done too
        first = wait_for(
            lambda: (
                (r := httpx.get(f"{s.base}/v1/topology", params={"uid": uids[0]})).status_code
                == 404
                and r
            ),
            30,
            f"the first request's result ({uids[0]}) evicted",
        )
        one_line_error(first, 404, "not found")
    finally:
        s.stop()


def test_queue_keeps_results_for_a_bounded_count_and_age():
    from fabriclab.topology.request_queue import RequestQueue, Result

    now = [0.0]  # the queue's clock, moved by hand
    q = RequestQueue(
        lambda item: Result(200, data=item),
        0.0,
        max_results=3,
        result_ttl=0.5,
        clock=lambda: now[0],
    )
    try:
        for i in range(5):
            q.submit(f"u{i}", str(i).encode(), 1)
        wait_for(
            lambda: all(q.get(f"u{i}") is None or q.get(f"u{i}").status == 200 for i in range(5)),
            10,
            "all five requests run",
        )
        kept = [i for i in range(5) if q.get(f"u{i}") is not None]
        assert len(kept) == 3 and 4 in kept
        now[0] = 0.4
        assert [i for i in range(5) if q.get(f"u{i}") is not None] == kept  # younger than it
        now[0] = 0.6
        assert [q.get(f"u{i}") for i in range(5)] == [None] * 5  # older than result_ttl
    finally:
        q.close()


def test_queue_repeat_within_the_delay_replaces_the_pending_request():
    """A repeat of a pending request replaces it: the second body runs, once, a whole
    delay after the repeat (the first one's delay is over before that, and nothing runs
    then).  Distinct requests each run once, on the pool's thread."""
    from fabriclab.topology.request_queue import RequestQueue, Result

    runs: list[bytes] = []
    now = [0.0]  # the queue's clock, moved by hand
    q = RequestQueue(
        lambda item: (runs.append(item), Result(200, data=item))[1],
        0.3,
        workers=1,  # requests run in the order they fall due
        clock=lambda: now[0],
    )
    try:
        q.submit("u", b"first", 5)  # due at 0.3
        now[0] = 0.05
        q.submit("probe", b"probe", 5)  # due at 0.35
        now[0] = 0.1
        q.submit("u", b"second", 6)  # due at 0.4
        now[0] = 0.37  # the first one's delay is over, and the probe's, not the second's
        wait_for(lambda: q.get("probe").status == 200, 10, "the probe run")
        assert runs == [b"probe"] and q.get("u").status == 202  # u did not fall due before it
        now[0] = 0.5
        wait_for(lambda: q.get("u").status == 200, 10, "the repeated request run")
        assert runs == [b"probe", b"second"] and q.get("u").data == b"second"
        # distinct requests each run once, on the pool's thread
        for i in range(20):
            q.submit(f"d{i}", b"x", 1)
        now[0] = 1.0
        wait_for(lambda: len(runs) == 22, 10, "the 20 distinct requests run")
        names = {t.name for t in threading.enumerate()}
        assert len([n for n in names if n.startswith("topology-worker")]) == 1
        assert len([n for n in names if n == "topology-scheduler"]) == 1
    finally:
        q.close()


def test_queue_refuses_when_too_many_wait():
    from fabriclab.topology.request_queue import QueueFull, RequestQueue, Result

    q = RequestQueue(lambda item: Result(200, data=b""), 60, max_waiting=2, max_waiting_bytes=100)
    try:
        q.submit("a", b"", 10)
        q.submit("a", b"", 10)  # a repeat replaces, does not add
        q.submit("b", b"", 10)
        with pytest.raises(QueueFull) as e:
            q.submit("c", b"", 10)
        assert e.value.status == 429
        with pytest.raises(QueueFull):
            q.submit("b", b"", 91)  # 10 + 91 bytes waiting
    finally:
        q.close()


def test_limit_is_the_documented_one():
    from fabriclab.topology import request_body

    assert request_body.MAX_BODY_BYTES == MAX_BODY
    assert "4 MiB" in (Path(__file__).parents[1] / "docs" / "topology.md").read_text()


# --- 5. --host 0.0.0.0 served everyone, no authentication, no warning -------------------------


def test_non_loopback_host_without_token_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FABRICLAB_TOPOLOGY_TOKEN"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fabriclab.cli",
            "serve-topology",
            "lab",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "error: --host: 0.0.0.0 is not a loopback"
    ), proc.stderr
    assert "FABRICLAB_TOPOLOGY_TOKEN" in proc.stderr


def test_non_loopback_host_with_token_requires_it(tmp_path):
    s = TopologyServer(
        tmp_path, "lab", host="0.0.0.0", env={"FABRICLAB_TOPOLOGY_TOKEN": TOKEN}
    ).wait_ready()
    try:
        assert "clients must send the bearer token" in s.log.read_text()
        body = _req()
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
        ):
            r = httpx.post(f"{s.base}/v1/generate", content=body, headers=headers)
            one_line_error(r, 401, "bearer token")
            assert r.headers["www-authenticate"] == "Bearer"
            assert (
                httpx.get(f"{s.base}/v1/topology", params={"uid": "x"}, headers=headers).status_code
                == 401
            )
            assert httpx.get(f"{s.base}/openapi.json", headers=headers).status_code == 401
        # refused before the body is read: a declared 100 MB body gets 401 at once
        answer, _ = _raw_request(
            s.port, b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 401 "), answer
        auth = {"Authorization": f"Bearer {TOKEN}"}
        r = httpx.post(f"{s.base}/v1/generate", content=body, headers=auth)
        assert r.status_code == 202, r.text
        assert topology_result(s.base, r.text, auth).status_code == 200
        assert httpx.get(f"{s.base}/healthz").status_code == 200  # probes need no token
    finally:
        s.stop()


def test_loopback_stays_open(srv):
    r = httpx.post(f"{srv.base}/v1/generate", content=_req())
    assert r.status_code == 202 and topology_result(srv.base, r.text).status_code == 200


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
        ("no-such-host.invalid", False),
    ],
)
def test_is_loopback(host, loopback):
    assert server.is_loopback(host) is loopback


# --- the API fuzzed from its OpenAPI document ------------------------------------------------


def _fuzz_service() -> server.TopologyService:
    """The app as ``serve-topology lab --models-dir DIR`` makes it, with no delay."""
    from fabriclab.cli.common import load_cluster
    from fabriclab.topology import inputs as topology_inputs
    from fabriclab.topology.providers import local_graph

    inputs = topology_inputs.from_cluster(load_cluster("lab"))

    def local(requested):
        return local_graph(inputs, requested, compat=False, names=False), inputs.gpus

    return server.TopologyService(local, str(TOPO), 0.0)


# Built at import: schemathesis's lazy (fixture) schemas do not run on pytest 9.
FUZZ_SERVICE = _fuzz_service()
FUZZ_APP = server.make_app(FUZZ_SERVICE)
fuzz = schemathesis.openapi.from_asgi("/openapi.json", FUZZ_APP)


@pytest.fixture(scope="module")
def fuzz_app():
    yield FUZZ_APP
    FUZZ_SERVICE.close()


@fuzz.parametrize()
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_api_from_its_openapi_document(case):
    """Every check schemathesis has (no 5xx, statuses and content types as documented,
    valid data accepted, invalid data refused); and a submitted request's result, once
    run, is never a 5xx either."""
    # /v1/topology and /v1/lookup answer with the status of an earlier request's outcome
    # (a well-formed request can fail: 400 "no model file name for simulation"), so
    # "valid data is accepted" does not hold for them; every other check does.
    excluded = [positive_data_acceptance] if case.path != "/v1/generate" else []
    response = case.call_and_validate(excluded_checks=excluded)
    if case.path == "/v1/generate" and response.status_code == 202:
        from starlette.testclient import TestClient

        with TestClient(FUZZ_APP) as tc:
            wait_for(
                lambda: tc.get("/v1/topology", params={"uid": response.text}).status_code != 202,
                10,
                f"request {response.text} run",
            )
            r = tc.get("/v1/topology", params={"uid": response.text})
        assert r.status_code < 500, r.text
        if r.status_code != 200:
            assert r.text.count("\n") == 1, r.text


def test_fuzz_sees_the_real_request_bodies(fuzz_app):
    from starlette.testclient import TestClient

    doc = TestClient(fuzz_app).get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert doc["paths"]["/v1/generate"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ] == {"$ref": "#/components/schemas/TopologyRequest"}
    assert set(schemas["EngineParams"]["properties"]) >= {
        "plugin",
        "blockSizes",
        "blockName",
        "topologies",
        "skeletonOnly",
    }
    assert schemas["Provider"]["properties"]["name"]["enum"][0] == "aws-sim"


@pytest.mark.parametrize(
    "body,status",
    [
        (b"[" * 100_000, 422),
        (b'{"a":' * 50 + b"1" + b"}" * 50, 422),
        (b"-" + b"9" * 4301, 422),
        (
            b'{"provider": {"name": "test"}, "engine": {"name": "slurm", "params": {"blockSizes": [1e999]}}}',
            400,
        ),
        (
            b'{"provider": {"name": "test"}, "engine": {"name": "slurm", "params": {"blockSizes": ['
            + b"9" * 101
            + b"]}}}",
            422,
        ),
        (b'"' + b'\\"' * 100_000, 400),
        (b"\xff\xfe{\x00}\x00", 400),
        (b" " * (MAX_BODY + 1), 413),
    ],
    ids=[
        "deep-array",
        "deep-object",
        "long-negative",
        "inf",
        "101-digits",
        "unclosed-string",
        "utf16",
        "big",
    ],
)
def test_large_and_deep_bodies_refused(fuzz_app, body, status):
    from starlette.testclient import TestClient

    with TestClient(fuzz_app) as tc:
        for path in ("/v1/generate", "/v1/lookup"):
            r = tc.post(path, content=body)
            assert r.status_code == status, r.text
            assert r.text.count("\n") == 1
