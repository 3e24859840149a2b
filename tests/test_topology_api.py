"""The topograph-compatible HTTP API, served by a real ``fabriclab serve-topology``
process and spoken to over HTTP, replaying topograph's own server test cases."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from conftest import FIXTURES
from helpers import TopologyServer, copy_models, topology_result

TOPO = FIXTURES / "topograph"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = copy_models(TOPO, tmp_path_factory.mktemp("models"))
    tmp = tmp_path_factory.mktemp("api")
    srv = TopologyServer(tmp, "lab", "--models-dir", str(models), "--aggregation-delay", "0.1")
    yield srv.wait_ready().base
    srv.stop()


def generate(base: str, payload: str) -> tuple[int, str]:
    r = httpx.post(
        f"{base}/v1/generate", content=payload, headers={"content-type": "application/json"}
    )
    assert r.status_code == 202, r.text
    t = topology_result(base, r.text)
    return t.status_code, t.text


def lines(text: str) -> dict[str, int]:
    """topograph's stringToLineMap: its server test compares lines as a multiset."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        out[line] = out.get(line, 0) + 1
    return out


def fx(name: str) -> str:
    return (TOPO / name).read_text()


CASES = [
    ("test", "simpleSlurmPayload", "simpleSlurmConfig"),
    ("aws-sim", "slurmTreePayload", "slurmTreeConfig"),
    ("aws-sim", "slurmBlockPayload", "slurmBlockConfig"),
    ("gcp-sim", "slurmTreePayload", "slurmTreeConfig"),
    ("gcp-sim", "slurmTrimmedTreePayload", "slurmTrimmedTreeConfig"),
    ("lambdai-sim", "slurmTreePayload", "slurmTreeConfig"),
    ("dsx-sim", "slurmBlockPayload", "slurmBlockConfig"),
    ("dsx-sim", "slurmTreePayload", "slurmTreeConfig"),
    ("dsx-sim", "slurmTrimmedTreePayload", "slurmTrimmedTreeConfig"),
]


@pytest.mark.parametrize("provider,payload,expected", CASES, ids=[f"{p}-{e}" for p, _, e in CASES])
def test_topograph_server_cases(server, provider, payload, expected):
    body = fx(f"pkg_server_http_server_test.{payload}.payload.json").replace("%s", provider)
    status, text = generate(server, body)
    assert status == 200, text
    assert lines(text) == lines(
        fx(f"pkg_server_http_server_test.{expected}.expected.topology.conf")
    )


def test_unknown_uid_is_404(server):
    r = httpx.get(f"{server}/v1/topology", params={"uid": "invalid-uid"})
    assert (r.status_code, r.text) == (404, "request ID invalid-uid not found\n")


def test_healthz(server):
    r = httpx.get(f"{server}/healthz")
    assert (r.status_code, r.text) == (200, "OK\n")


def test_lab_as_the_seed_update_topology_script_asks(server):
    """The seed lab's update-topology request, answered from the lab fabric."""
    body = json.dumps(
        {
            "provider": {
                "name": "infiniband-bm",
                "params": {"accelerator": {"source": "nvidia-smi"}},
            },
            "engine": {"name": "slurm", "params": {"plugin": "topology/block"}},
        }
    )
    status, text = generate(server, body)
    assert status == 200
    # the seed's script takes any block name (its check: BlockName=\S+ Nodes=sched-worker\[);
    # fabriclab's reading names the block after the spec's NVLink domain
    assert text == (
        "# nvl8=7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1\n"
        "BlockName=nvl8 Nodes=sched-worker[1-2]\nBlockSizes=2\n"
    )
    k8s = json.dumps({"provider": {"name": "infiniband-bm"}, "engine": {"name": "k8s"}})
    status, text = generate(server, k8s)
    labels = json.loads(text)
    assert labels["sched-worker1"] == {
        "accelerator.topograph.run/domain": "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91.1",
        "fabric.topograph.run/tier-0": "S-2c5eab036832a42e",
        "fabric.topograph.run/tier-1": "S-2c5eab0306555424",
    }


def test_pending_then_done_and_lookup(server):
    body = fx("pkg_server_http_server_test.simpleSlurmPayload.payload.json").replace("%s", "test")
    r = httpx.post(f"{server}/v1/generate", content=body)
    uid = r.text
    first = httpx.get(f"{server}/v1/topology", params={"uid": uid})
    assert first.status_code in (200, 202)
    if first.status_code == 202:
        assert first.text == f"request ID {uid} has been created"
    status, _ = generate(server, body)
    assert status == 200
    look = httpx.post(f"{server}/v1/lookup", content=body)
    assert look.status_code == 200 and "SwitchName=S1 Switches=S[2-3]" in look.text


@pytest.mark.parametrize(
    "body,status,message",
    [
        ("{not json", 400, "invalid JSON"),
        ('{"engine": {"name": "slurm"}}', 400, "no provider given for topology request"),
        ('{"provider": {"name": "x"}, "engine": {"name": "slurm"}}', 400, "unsupported provider x"),
        ('{"provider": {"name": "test"}}', 400, "no engine given for topology request"),
        (
            '{"provider": {"name": "test"}, "engine": {"name": "nope"}}',
            400,
            "unsupported engine nope",
        ),
    ],
)
def test_bad_requests(server, body, status, message):
    r = httpx.post(f"{server}/v1/generate", content=body)
    assert r.status_code == status and message in r.text


def test_request_errors_are_reported_not_hung(server):
    body = json.dumps(
        {
            "provider": {"name": "test"},
            "engine": {"name": "slurm", "params": {"blockSizes": [3, 5]}},
        }
    )
    status, text = generate(server, body)
    assert status == 400 and "power-of-two multiple" in text
    body = json.dumps(
        {
            "provider": {"name": "aws-sim", "params": {"modelFileName": "missing.yaml"}},
            "engine": {"name": "slurm"},
        }
    )
    status, text = generate(server, body)
    assert status == 400 and "missing.yaml" in text


def test_server_survives_garbage(server):
    with socket.create_connection(("127.0.0.1", int(server.rsplit(":", 1)[1]))) as s:
        s.sendall(b"\x00\xffGARBAGE\r\n\r\n")
        s.recv(100)
    assert httpx.get(f"{server}/healthz").status_code == 200
