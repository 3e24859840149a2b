"""The API as users run it: ``fabriclab up --api`` starts it beside the fabric (its URL in
``status --json``) and ``down`` stops it; ``fabriclab api`` serves a fabric that is
already up, answers 503 while it is down and again once it is back; an address beyond
this machine is refused without credentials; with credentials nothing answers without
them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from helpers import wait_for

from fabriclab.sim.run import apirecord

FAB = [sys.executable, "-m", "fabriclab.cli"]
LINK = "LAB-IBLEAF-01[5]"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*FAB, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.fabric("lab", sm=False, virtual_clock=True, api="127.0.0.1:0")
def test_up_api_serves_the_fabric_and_down_stops_it(fabric):
    url = fabric.api_url
    assert url and url.startswith("http://127.0.0.1:")
    [row] = json.loads(cli("status", "--json").stdout)
    assert row["api"] == url
    with httpx.Client(base_url=url, timeout=10) as c:
        assert c.get("/healthz").text == "OK"
        r = c.post("/api/v1/faults", json={"kind": "down", "target": LINK})
        assert r.status_code == 201, r.text
        # the fabric's own CLI sees the fault the API injected
        listed = json.loads(cli("fault", "list", "--json", "--name", fabric.name).stdout)
        assert [f["id"] for f in listed] == [r.json()["id"]]
        assert fabric.wait_event(name="Link went down")["object_name"].startswith(LINK)
    pid = apirecord.load(fabric.name)["pid"]
    fabric.down()
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 15, "the API's process to end")
    assert not apirecord.record_path(fabric.name).exists()  # it cleaned up after itself
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "healthz", timeout=2)


@pytest.mark.fabric("lab", sm=False, virtual_clock=True)
def test_api_beside_a_fabric_says_503_while_it_is_down(fabric, fabric_factory, tmp_path):
    log = open(tmp_path / "api.log", "w")
    proc = subprocess.Popen(
        [*FAB, "api", "--name", fabric.name, "--listen", "127.0.0.1:0"], stdout=log, stderr=log
    )
    try:
        doc = wait_for(lambda: apirecord.load(fabric.name), 60, "the API to listen")
        url = doc["url"]
        assert httpx.get(url + "api/v1/spec").json()["cluster"] == "lab"
        fabric.down()
        r = httpx.get(url + "api/v1/faults", timeout=10)
        assert r.status_code == 503 and "\n" not in r.json()["error"], r.text
        fabric_factory("lab", name=fabric.name, sm=False, virtual_clock=True)
        assert httpx.get(url + "api/v1/faults", timeout=10).json() == []
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.mark.fabric("lab", sm=False)
def test_a_non_loopback_address_needs_credentials(fabric):
    r = cli("api", "--name", fabric.name, "--listen", "0.0.0.0:0")
    assert r.returncode == 2
    assert r.stderr.startswith("error: --listen 0.0.0.0: not a loopback address")
    assert len(r.stderr.splitlines()) == 1
    r = cli("up", "lab", "--name", "other", "--api", "0.0.0.0:0")
    assert r.returncode == 2 and r.stderr.startswith("error: --api 0.0.0.0:"), r.stderr


@pytest.mark.fabric("lab", sm=False, api="127.0.0.1:0", api_credentials="ops:s3cret")
def test_with_credentials_nothing_answers_without_them(fabric):
    url = fabric.api_url
    assert url
    r = httpx.get(url + "api/v1/spec", timeout=10)
    assert r.status_code == 401 and r.json()["error"]
    assert httpx.get(url + "api/v1/spec", auth=("ops", "s3cret"), timeout=10).status_code == 200
    # the credentials travelled in the environment, never on a command line
    pid = apirecord.load(fabric.name)["pid"]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert b"s3cret" not in f.read()
