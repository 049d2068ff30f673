// The simulator page: posts the three YAML texts to /api/simulate and draws the answer.
// Everything is built with DOM calls and textContent (never innerHTML), so names and messages
// taken from the user's YAML are shown as text, not markup.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let lastResult = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c === null || c === undefined ? "" : c);
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function setStatus(text) { $("status").textContent = text; }

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

// -- loading ---------------------------------------------------------------------------------------

async function loadInitial() {
  try {
    const r = await fetch("api/initial");
    const d = await r.json();
    for (const k of ["cluster", "pods", "config"]) if (d[k]) $(k).value = d[k];
    if (d.seed !== null && d.seed !== undefined) $("seed").value = String(d.seed);
    if (d.profile) $("profile").value = d.profile;
  } catch (e) {
    showError("could not read the initial texts: " + e);
  }
}

function wireFileInputs() {
  for (const input of document.querySelectorAll('input[type="file"]')) {
    input.addEventListener("change", () => {
      const f = input.files && input.files[0];
      if (!f) return;
      f.text().then((t) => { $(input.dataset.target).value = t; setStatus("loaded " + f.name); });
    });
  }
}

// -- running ---------------------------------------------------------------------------------------

async function run() {
  const button = $("run");
  button.disabled = true;
  showError("");
  setStatus("running...");
  const body = {
    cluster: $("cluster").value,
    pods: $("pods").value,
    config: $("config").value,
    seed: $("seed").value.trim(),
    profile: $("profile").value.trim(),
  };
  try {
    const r = await fetch("api/simulate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    let d;
    try { d = await r.json(); } catch (e) { d = { error: "HTTP " + r.status + ": the answer is not JSON" }; }
    if (!r.ok) {
      $("results").hidden = true;
      showError(d.error || "HTTP " + r.status);
      setStatus("failed");
      return;
    }
    lastResult = d;
    render(d);
    setStatus("done (seed " + d.seed + ")");
  } catch (e) {
    showError("the request failed: " + e);
    setStatus("failed");
  } finally {
    button.disabled = false;
  }
}

// -- rendering -------------------------------------------------------------------------------------

function render(d) {
  $("results").hidden = false;
  renderSummary(d);
  renderPods(d);
  renderGroups(d.groups || []);
  renderPreempted(d.preempted || []);
  renderCharts(d.utilisation || []);
  const notes = $("notes");
  notes.replaceChildren(...(d.notes || []).map((n) => el("li", {}, n)));
  $("detail").hidden = true;
}

function renderSummary(d) {
  const s = d.summary;
  const parts = [
    s.pods + " pods on " + s.nodes + " nodes: ",
    el("b", { class: "ok" }, s.placed + " placed"),
    ", ",
    el("span", { class: s.unschedulable ? "bad" : "muted" }, s.unschedulable + " unschedulable"),
  ];
  for (const [k, word] of [["errors", "errors"], ["gated", "gated"], ["waiting", "waiting"], ["preempted", "preempted"]]) {
    if (s[k]) parts.push(", " + s[k] + " " + word);
  }
  parts.push(" \u00b7 profile " + d.profile + " \u00b7 seed " + d.seed);
  $("summary").replaceChildren(...parts);
}

function renderPods(d) {
  const rows = d.pods.map((p) => {
    const tr = el("tr", { "data-pod": p.pod, "data-result": p.result, "data-node": p.node, tabindex: "0" },
      el("td", {}, p.pod),
      el("td", { class: p.result === "scheduled" ? "ok" : (p.result === "unschedulable" || p.result === "error" ? "bad" : "") }, p.result),
      el("td", {}, p.node),
      el("td", { class: "num" }, String(p.attempts)),
      el("td", { class: "num" }, p.score === null ? "" : String(p.score)),
      el("td", { class: "msg" }, p.message || (p.ties.length > 1 ? "tie among " + p.ties.join(", ") : "")));
    tr.addEventListener("click", () => showDetail(p.pod));
    tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") showDetail(p.pod); });
    return tr;
  });
  $("pods-table").tBodies[0].replaceChildren(...rows);
}

function showDetail(podKey) {
  const d = lastResult;
  const pod = d.pods.find((p) => p.pod === podKey);
  for (const tr of $("pods-table").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.pod === podKey);
  const diag = d.diagnoses[podKey];
  $("detail").hidden = false;
  $("detail-title").textContent = podKey + ": " + pod.result + (pod.node ? " on " + pod.node : "") +
    " after " + pod.attempts + " attempt" + (pod.attempts === 1 ? "" : "s");
  const head = $("detail-table").tHead;
  const body = $("detail-table").tBodies[0];
  if (!diag) {
    $("detail-note").textContent = pod.message || "never attempted: no node was evaluated";
    head.replaceChildren();
    body.replaceChildren();
    return;
  }
  $("detail-note").textContent = diag.note;
  const plugins = diag.scorePlugins;
  head.replaceChildren(el("tr", {},
    el("th", {}, "Node"), el("th", {}, "Filter"), el("th", {}, "Plugin"), el("th", {}, "Reason"),
    ...plugins.map((p) => el("th", { title: p }, p)), el("th", {}, "Total")));
  body.replaceChildren(...diag.nodes.map((n) => {
    const tr = el("tr", { "data-node": n.node, "data-verdict": n.verdict, class: n.node === pod.node ? "chosen" : null },
      el("td", {}, n.node),
      el("td", { class: n.verdict === "rejected" ? "rejected" : (n.verdict === "feasible" ? "feasible" : "muted") }, n.verdict),
      el("td", { class: "plugin" }, n.plugin),
      el("td", { class: "reason" }, n.reasons.join("; ")),
      ...plugins.map((p) => el("td", { class: "num" }, n.scores[p] === undefined ? "" : String(n.scores[p]))),
      el("td", { class: "num" }, n.total === null ? "" : String(n.total)));
    return tr;
  }));
}

function renderGroups(groups) {
  $("groups-section").hidden = groups.length === 0;
  $("groups-table").tBodies[0].replaceChildren(...groups.map((g) => el("tr", { "data-group": g.key },
    el("td", {}, g.key), el("td", {}, g.api),
    el("td", { class: "num" }, g.minCount === null ? "" : String(g.minCount)),
    el("td", { class: "num" }, g.placed + "/" + g.members),
    el("td", { class: g.result === "scheduled" ? "ok" : "bad" }, g.result),
    el("td", { class: "wrap" }, (g.pods || []).join(", ")),
    el("td", { class: "wrap" }, g.message || ""))));
}

function renderPreempted(victims) {
  $("preempted-section").hidden = victims.length === 0;
  $("preempted-table").tBodies[0].replaceChildren(...victims.map((v) =>
    el("tr", {}, el("td", {}, v.pod), el("td", {}, v.node), el("td", {}, v.by))));
}

// -- charts ----------------------------------------------------------------------------------------

function amount(key, n) {
  if (key === "cpu") return (n / 1000).toFixed(n % 1000 ? 2 : 0) + " cores";
  if (key === "memory") return (n / 2 ** 30).toFixed(1) + " Gi";
  return String(n);
}

function chartRows(u) {
  const rows = [["cpu", "CPU", u.before.cpu, u.after.cpu],
    ["memory", "Memory", u.before.memory, u.after.memory],
    ["pods", "Pods", u.before.pods, u.after.pods]];
  for (const [name, a] of Object.entries(u.after.extended || {})) {
    rows.push([name, name, (u.before.extended || {})[name] || null, a]);
  }
  return rows;
}

function nodeChart(u) {
  const rows = chartRows(u);
  const W = 300, labelW = 90, barW = 160, rowH = 22;
  const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + rows.length * rowH, role: "img",
    "aria-label": u.node + " utilisation", preserveAspectRatio: "xMinYMin meet" });
  rows.forEach(([key, title, b, a], i) => {
    const y = i * rowH;
    svg.append(svgEl("text", { x: 0, y: y + 15, "font-size": 11 }, title.length > 14 ? title.slice(0, 13) + "\u2026" : title));
    svg.append(svgEl("rect", { x: labelW, y: y + 4, width: barW, height: 13, class: "bar-track" }));
    if (!a || a.percent === null) {
      svg.append(svgEl("text", { x: labelW + 4, y: y + 15, "font-size": 11, fill: "#656d76" }, "n/a"));
      return;
    }
    const pa = a.percent, pb = b && b.percent !== null ? b.percent : 0;
    const after = svgEl("rect", { x: labelW, y: y + 4, width: barW * Math.min(pa, 100) / 100, height: 13,
      class: pa > 100 ? "bar-over" : "bar-after" });
    after.append(svgEl("title", {}, title + ": " + amount(key, a.requested) + " of " + amount(key, a.allocatable) +
      " (" + pb.toFixed(0) + "% before, " + pa.toFixed(0) + "% after)"));
    svg.append(after);
    svg.append(svgEl("rect", { x: labelW, y: y + 4, width: barW * Math.min(pb, 100) / 100, height: 13, class: "bar-before" }));
    svg.append(svgEl("text", { x: labelW + barW + 6, y: y + 15, "font-size": 11 }, pa.toFixed(0) + "%"));
  });
  return svg;
}

function renderCharts(usages) {
  $("charts").replaceChildren(...usages.map((u) =>
    el("div", { class: "node-chart", "data-node": u.node }, el("h3", {}, u.node), nodeChart(u))));
}

document.addEventListener("DOMContentLoaded", () => {
  wireFileInputs();
  $("run").addEventListener("click", run);
  loadInitial();
});
