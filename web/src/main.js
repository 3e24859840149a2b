// The web view: draws /api/v1/graph with cytoscape.js (canvas renderer, the server's
// positions as a preset layout), keeps it live from /api/v1/events/stream, shows a
// link's or a switch's details and fails or restores a link through /api/v1/faults.
import cytoscape from "cytoscape";

const FEED_MAX = 500; // events kept in the feed (the count above it says how many came)
const $ = (id) => document.getElementById(id);
const page = { view: "auto", focus: null, cy: null, drawn: null, events: 0, graph: null, panel: 0 };
window.fabriclab = page; // for tests and benchmarks: page.cy, page.drawn (ms after navigation)

const STYLE = [
  { selector: "node", style: { label: "data(label)", "font-size": 10, "min-zoomed-font-size": 7,
    "text-valign": "bottom", "text-margin-y": 2, "background-color": "#7a8b99", width: 14, height: 14 } },
  { selector: 'node[kind="switch"]', style: { shape: "round-rectangle", width: 34, height: 16,
    "background-color": "#3e6aa0" } },
  { selector: 'node[role="spine"], node[role="core"]', style: { "background-color": "#24466e" } },
  { selector: 'node[kind="tray"]', style: { shape: "rectangle", width: 12, height: 20,
    "font-size": 8, "text-rotation": -1.2, "text-halign": "left", "text-valign": "bottom" } },
  { selector: 'node[kind="rack"]', style: { shape: "round-rectangle", "background-color": "#eef2f6",
    "border-width": 1, "border-color": "#b7c3d0", "border-style": "dashed", "text-valign": "top",
    "font-size": 11, padding: 6 } },
  { selector: 'node[kind="hosts"], node[kind="pod"], node[kind="group"]', style: {
    shape: "barrel", width: "mapData(count, 1, 600, 24, 60)", height: 22,
    "background-color": "#8fa6bf", "border-width": 1, "border-color": "#3e6aa0",
    "font-size": 16, "min-zoomed-font-size": 4, "text-rotation": -0.7, "text-halign": "left" } },
  { selector: "node:selected", style: { "border-width": 3, "border-color": "#f0a202" } },
  { selector: "edge", style: { "curve-style": "haystack", "haystack-radius": 0,
    width: "mapData(count, 1, 64, 1.2, 8)", opacity: 0.85,
    "line-color": "mapData(util, 0, 1, #b7c3d0, #3b1f8f)" } },
  { selector: 'edge[status="degraded"]', style: { "line-color": "#f0a202", width: 3, "z-index": 5 } },
  { selector: 'edge[status="down"]', style: { "line-color": "#d62728", width: 4, "z-index": 9 } },
  { selector: "edge[fault > 0]", style: { "line-style": "dashed", "curve-style": "straight" } },
  { selector: "edge:selected", style: { "overlay-color": "#1f77b4", "overlay-opacity": 0.18,
    "overlay-padding": 5 } },
];

function showError(msg) {
  const e = $("error");
  e.textContent = msg;
  e.hidden = !msg;
}

async function getJSON(url, opts) {
  const r = await fetch(url, opts);
  const body = await r.json().catch(() => ({ error: `${r.status} ${r.statusText}` }));
  if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
  return body;
}

function elements(g) {
  const racks = g.nodes.filter((n) => n.kind === "rack"); // parents before their children
  const rest = g.nodes.filter((n) => n.kind !== "rack");
  return [
    ...racks.map((n) => ({ group: "nodes", data: n })),
    ...rest.map((n) => ({ group: "nodes", data: n, position: n.position })),
    ...g.edges.map((e) => ({ group: "edges", data: e })),
  ];
}

function showCounts(g) {
  const c = g.counts;
  $("counts").textContent = `${g.view}${g.focus ? " " + g.focus : ""}: ${c.nodes} drawn, ` +
    `${c.edges} edges · ${c.switches} switches, ${c.trays} trays, ${c.links} links, ` +
    `${c.down} down, ${c.faults} held by faults`;
  for (const b of document.querySelectorAll("#views button[data-view]"))
    b.classList.toggle("on", b.dataset.view === page.view);
  $("up").hidden = !g.focus;
}

async function draw() {
  const q = new URLSearchParams({ view: page.view });
  if (page.focus) q.set("focus", page.focus);
  const g = await getJSON(`api/v1/graph?${q}`);
  page.graph = g;
  if (page.cy) page.cy.destroy();
  const cy = cytoscape({
    container: $("cy"),
    elements: elements(g),
    layout: { name: "preset", fit: true, padding: 20 },
    style: STYLE,
    textureOnViewport: g.edges.length > 3000,
    hideEdgesOnViewport: g.edges.length > 20000,
    minZoom: 0.02,
    maxZoom: 8,
  });
  page.cy = cy;
  cy.one("render", () => { if (page.drawn === null) page.drawn = performance.now(); });
  cy.on("tap", "edge", (ev) => showLink(ev.target));
  cy.on("tap", "node", (ev) => tapNode(ev.target));
  showCounts(g);
}

async function refresh() {
  // the server's aggregates changed: take the new data for what is drawn
  const q = new URLSearchParams({ view: page.graph.view });
  if (page.focus) q.set("focus", page.focus);
  const g = await getJSON(`api/v1/graph?${q}`);
  const cy = page.cy;
  cy.batch(() => {
    for (const e of g.edges) {
      const el = cy.getElementById(e.id);
      if (el.nonempty()) el.data(e);
    }
  });
  page.graph = g;
  showCounts(g);
}

function go(view, focus) {
  page.view = view;
  page.focus = focus || null;
  const q = new URLSearchParams({ view });
  if (focus) q.set("focus", focus);
  history.replaceState(null, "", `?${q}`);
  draw().catch((e) => showError(e.message));
}

function tapNode(n) {
  const d = n.data();
  if (d.drill) return go(d.drill.view, d.drill.focus);
  page.panel += 1;
  const t = h("table");
  const about = { kind: d.kind, role: d.role, tier: d.tier, guid: d.guid, members: d.detail };
  for (const [k, v] of Object.entries(about))
    if (v !== undefined) t.append(h("tr", {}, h("td", {}, k), h("td", {}, String(v))));
  const links = n.connectedEdges();
  const down = links.filter('[status="down"]').length;
  $("detail").replaceChildren(h("h2", {}, d.label), t,
    h("p", {}, `${links.length} drawn links, ${down} down`));
}

function h(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.append(...kids);
  return e;
}

async function showLink(edge) {
  const d = edge.data();
  const token = ++page.panel; // a later click wins over this one's slower answers
  const parts = [];
  if (!d.ports) {
    parts.push(h("h2", {}, `${d.count} links`),
      h("p", {}, `${d.down} down, ${d.fault} held by faults, busiest ${(d.util * 100).toFixed(1)} %`),
      h("p", { class: "hint" }, "Open a group to see its links one by one."));
  } else {
    parts.push(h("h2", { id: "link-name" }, d.ends.join(" — ")),
      h("p", {}, "status ", h("span", { id: "link-status", class: `status-${d.status}` }, d.status),
        `, utilisation ${(d.util * 100).toFixed(1)} %`, d.fault ? ", held by a fault" : ""));
    const fail = h("button", { id: "fail" }, "Fail link");
    const restore = h("button", { id: "restore" }, "Restore link");
    fail.onclick = () => act("api/v1/faults", { kind: "down", target: d.ends[0] });
    restore.onclick = () => act("api/v1/faults/up", { target: d.ends[0] });
    parts.push(h("div", { class: "actions" }, fail, restore));
    for (const name of d.ports) {
      try {
        parts.push(portTable(await getJSON(`api/v1/ports/${encodeURIComponent(name)}`)));
      } catch (e) {
        parts.push(h("p", { class: "status-down" }, `${name}: ${e.message}`));
      }
    }
  }
  if (token === page.panel) $("detail").replaceChildren(...parts);
}

function portTable(p) {
  const t = h("table", { class: "port" });
  const row = (k, v, bad) => t.append(h("tr", bad ? { class: "bad" } : {}, h("td", {}, k),
    h("td", { class: "n" }, String(v))));
  t.append(h("caption", {}, `${p.target} (${p.name}), LID ${p.lid}`));
  row("logical state", p.logical_state, p.logical_state !== "Active");
  row("physical state", p.physical_state, p.physical_state !== "Link Up");
  row("width / speed", `${p.width} ${p.speed}`);
  row("utilisation", `${(p.utilisation * 100).toFixed(1)} %`);
  for (const [k, v] of Object.entries(p.counters))
    row(k, v, v > 0 && !/Data|Pkts|Wait/.test(k));
  return t;
}

async function act(url, body) {
  try {
    await getJSON(url, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
    showError("");
  } catch (e) {
    showError(e.message);
  }
}

function addEvent(ev) {
  page.events += 1;
  const feed = $("feed");
  const li = h("li", { "data-id": String(ev.id) },
    h("span", { class: `sev sev-${ev.severity}` }, ev.severity),
    `${ev.name}: ${ev.object_name} `, h("span", { class: "when" }, ev.timestamp || ""));
  feed.prepend(li);
  while (feed.children.length > FEED_MAX) feed.lastChild.remove();
  $("feed-count").textContent = page.events > FEED_MAX
    ? `(${page.events} since opened, the last ${FEED_MAX} shown; all: fabriclab events)`
    : `(${page.events})`;
}

let refreshing = null;
function patchLinks(msg) {
  const cy = page.cy;
  if (!cy) return;
  const sel = cy.$("edge:selected");
  let mine = false;
  cy.batch(() => {
    for (const [row, [status, fault, util]] of Object.entries(msg.links || {})) {
      const el = cy.getElementById(`l${row}`);
      if (el.nonempty()) el.data({ status, fault, util });
      if (sel.nonempty() && sel.id() === `l${row}`) mine = true;
    }
  });
  if (mine) showLink(sel[0]); // its ports' states and counters again
  // the aggregates, the counts and anything not drawn as one cable: from the server
  if (!refreshing)
    refreshing = setTimeout(() => {
      refreshing = null;
      refresh().catch((e) => showError(e.message));
    }, msg.reload ? 100 : 1000);
}

function listen() {
  const es = new EventSource("api/v1/events/stream");
  es.addEventListener("fabric", (m) => addEvent(JSON.parse(m.data)));
  es.addEventListener("links", (m) => patchLinks(JSON.parse(m.data)));
  es.onerror = () => showError("the live feed is reconnecting…");
  es.onopen = () => {
    showError("");
    refresh().catch((e) => showError(e.message)); // what changed before the stream began
  };
}

function find(text) {
  const cy = page.cy;
  const want = text.trim();
  const hit = cy.edges().filter((e) => (e.data("ends") || []).includes(want));
  if (hit.empty()) return showError(`${want}: no single link drawn with that end here`);
  showError("");
  cy.elements().unselect();
  hit.select();
  cy.animate({ fit: { eles: hit.connectedNodes(), padding: 80 } }, { duration: 200 });
  showLink(hit[0]);
}

function main() {
  const q = new URLSearchParams(location.search);
  page.view = q.get("view") || "auto";
  page.focus = q.get("focus");
  for (const b of document.querySelectorAll("#views button[data-view]"))
    b.onclick = () => go(b.dataset.view, null);
  $("up").onclick = () => go(page.view, null);
  $("find").onsubmit = (ev) => { ev.preventDefault(); find($("find-text").value); };
  draw().then(listen).catch((e) => showError(e.message));
}

main();
