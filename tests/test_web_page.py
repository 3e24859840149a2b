"""The web view in Debian's headless Chromium, driven by Playwright, over the API served
by uvicorn on 127.0.0.1 and a live gb200-su fabric: the page draws every switch and
tray; failing a link from the page (its controls, not a request of the test's) turns
the link red and puts the event in the feed within two seconds; restoring it turns it
back; a screenshot for the docs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from api_fabric import api_fabric
from web_page import chromium, first_draw, locked_source, serve

RED = "rgb(214,39,40)"  # #d62728, the page's colour of a link that is down
LINK_END = "SU1-IBLEAF-R3-03[7]"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    lock = threading.Lock()
    with api_fabric(tmp_path_factory.mktemp("web"), spec="gb200-su") as f:
        with lock:  # some traffic, for the utilisation colours
            f.live.traffic_request("ring", ["gb-r0[1-8]-t0[1-4]"], {"rate": "300Gb/s"})
            f.live.advance(1.0)
        with serve(locked_source(f.source, lock)) as url:
            yield f, lock, url


def test_page_draws_every_switch_and_tray_and_fails_a_link(site, tmp_path):
    f, lock, url = site
    lay = f.source.layout()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        first_draw(page, url)
        drawn = page.evaluate(
            """() => {
                const cy = window.fabriclab.cy;
                const labels = (k) => cy.nodes(`[kind="${k}"]`).map((n) => n.data('label'));
                return {switches: labels('switch'), trays: labels('tray'),
                        edges: cy.edges().length,
                        canvases: document.querySelectorAll('#cy canvas').length};
            }"""
        )
        want = {lay.nodes["name"][i] for i in range(lay.node_count) if lay.node_switch[i]}
        assert set(drawn["switches"]) == want and len(want) == 41
        assert set(drawn["trays"]) == set(lay.trays) and len(lay.trays) == 144
        assert drawn["edges"] == len(lay.links)
        assert drawn["canvases"] > 0  # cytoscape's canvas renderer
        # the clock moves: the traffic shows as utilisation
        with lock:
            f.live.advance(1.0)
        page.wait_for_function(
            "() => window.fabriclab.cy.edges().some((e) => e.data('util') > 0.5)", timeout=10_000
        )

        # fail a link through the page: find it, click "Fail link"
        page.fill("#find-text", LINK_END)
        page.press("#find-text", "Enter")
        page.wait_for_selector("#fail")
        assert LINK_END in page.inner_text("#link-name")
        edge = page.evaluate("() => window.fabriclab.cy.$('edge:selected').id()")
        start = time.monotonic()
        page.click("#fail")
        page.wait_for_function(
            """([id, end]) => window.fabriclab.cy.$id(id).data('status') === 'down'
                && [...document.querySelectorAll('#feed li')].some(
                    (li) => li.textContent.includes('Link went down') && li.textContent.includes(end))""",
            arg=[edge, LINK_END],
            timeout=2_000,
        )
        took = time.monotonic() - start
        assert took <= 2.0
        colour = page.evaluate(f"() => window.fabriclab.cy.$id('{edge}').style('line-color')")
        assert colour.replace(" ", "") == RED
        # the panel shows it, with the ports' states and counters read again
        page.wait_for_function(
            """() => document.getElementById('link-status')?.textContent === 'down'
                && document.getElementById('detail').textContent.includes('Polling')""",
            timeout=5_000,
        )
        assert "LinkDownedCounter" in page.inner_text("#detail")
        page.wait_for_function(
            "() => document.getElementById('counts').textContent.includes(' 1 down')",
            timeout=5_000,
        )
        # a wider look around the link for the picture
        page.evaluate(
            """() => { const cy = window.fabriclab.cy; const e = cy.$('edge:selected');
                       cy.zoom({level: cy.zoom() * 0.4, renderedPosition: e.renderedMidpoint()});
                       cy.panBy({x: 0, y: cy.height() * 0.25}); }"""
        )
        shot = tmp_path / "web-view.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 20_000
        docs = os.environ.get("FABRICLAB_SCREENSHOT")  # where the docs' copy goes
        if docs:
            Path(docs).write_bytes(shot.read_bytes())

        # and back up
        page.click("#restore")
        page.wait_for_function(
            "(id) => window.fabriclab.cy.$id(id).data('status') !== 'down'",
            arg=edge,
            timeout=2_000,
        )
        assert not errors, errors


def test_summary_drill_down_in_the_browser(site):
    _f, _lock, url = site
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        first_draw(page, url + "?view=summary")
        groups = page.evaluate("() => window.fabriclab.cy.nodes('[kind=\"hosts\"]').length")
        assert groups == 32
        # click a host group where cytoscape draws it
        pos = page.evaluate(
            """() => { const n = window.fabriclab.cy.nodes('[kind="hosts"]')[0];
                       const p = n.renderedPosition(); const b = document
                       .getElementById('cy').getBoundingClientRect();
                       return {x: b.left + p.x, y: b.top + p.y, leaf: n.data('leaf')}; }"""
        )
        page.mouse.click(pos["x"], pos["y"])
        page.wait_for_function(
            "() => window.fabriclab.cy.nodes('[kind=\"tray\"]').length === 18", timeout=10_000
        )
        assert f"focus={pos['leaf']}" in page.url
        assert not page.is_hidden("#up")
