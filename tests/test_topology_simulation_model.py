"""topograph's simulation models as providers (topology/providers/simulation_model.py):
graphs in-process, and a malformed model answered through the API as a one-line 400 (it
was an internal error 500 with a Python exception's text)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES
from helpers import wait_for
from starlette.testclient import TestClient

from fabriclab.topology import server
from fabriclab.topology.providers.simulation_model import SimulationModel, SimulationModelError

MODEL = """
switches:
  core: {switches: [leaf1, leaf2], labels: {topology.kubernetes.io/region: east}}
blocks:
  - {switch: leaf1, nodes: ['n[1-2]'], annotations: {accelerator.topology.test/domain: nvl-a}}
  - {switch: leaf2, nodes: [n3]}
"""


def model() -> SimulationModel:
    import yaml

    return SimulationModel.from_data(yaml.safe_load(MODEL), "m.yaml")


def test_a_model_as_topographs_test_provider_sees_it():
    graph = model().test_graph()
    core = graph.tiers.vertices["core"]
    assert sorted(core.vertices) == ["leaf1", "leaf2"]
    assert {v.id: v.name for v in core.vertices["leaf1"].vertices.values()} == {
        "i-n1": "n1",
        "i-n2": "n2",
    }
    assert sorted(graph.domains["nvl-a"]) == ["n1", "n2"]


def test_a_model_as_a_sim_provider_sees_it():
    nodes = model().nodes
    assert (
        nodes["n1"].layers == ["leaf1", "core"]
        and nodes["n1"].labels["topology.kubernetes.io/region"] == "east"
    )
    graph = model().sim_graph("aws-sim", {"n3": "host3", "gone": "host9"})
    assert graph.tiers.vertices["core"].vertices["leaf2"].vertices["n3"].name == "host3"
    assert graph.tiers.vertices["no-topology"].vertices["gone"].name == "host9"
    assert model().dra_graph().domains["nvl-a"]["n2"].instance_id == "n2"


BAD_MODELS = [
    ("switches: [a, b]\n", "switches: a mapping"),
    ("blocks:\n  - nodes: 5\n", "blocks[0].nodes: a list of strings"),
    (
        'blocks:\n  - nodes: ["n[1-999999]"]\n',
        "blocks[0].nodes: expanded node list exceeds 500000 entries",
    ),
    ("switches:\n  s1: {switches: s2}\n", "switches.s1.switches: a list of strings"),
    ("blocks:\n  - {nodes: [n1], labels: [a]}\n", "blocks[0].labels: a mapping"),
    ("blocks: {a: 1}\n", "blocks: a list of capacity blocks"),
    ("a: &a [*a]\n", "m.yaml"),  # a recursive alias: refused by the guarded loader
]


@pytest.mark.parametrize("text,message", BAD_MODELS)
def test_a_malformed_model_is_a_model_error(tmp_path, text, message):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(SimulationModelError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SimulationModel.load(path)


@pytest.mark.parametrize("text,message", BAD_MODELS[:5])
def test_the_api_answers_a_malformed_model_with_400(tmp_path, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    service = server.TopologyService(None, str(tmp_path), 0.0)
    try:
        with TestClient(server.make_app(service)) as client:
            body = {
                "provider": {"name": "test", "params": {"modelFileName": "bad.yaml"}},
                "engine": {"name": "slurm"},
            }
            uid = client.post("/v1/generate", json=body).text
            r = wait_for(
                lambda: (
                    (r := client.get("/v1/topology", params={"uid": uid})).status_code != 202 and r
                ),
                10,
                f"request {uid} run",
                interval=0.01,
            )
    finally:
        service.close()
    assert r.status_code == 400, r.text
    assert message in r.text and r.text.count("\n") == 1


def test_topographs_models_still_load():
    for path in sorted(FIXTURES.glob("topograph/tests__models__*.yaml")):
        assert SimulationModel.load(path).nodes, path.name
