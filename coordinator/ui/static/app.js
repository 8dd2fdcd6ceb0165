// Slackline live view. Everything shown is fetched by this script from the
// coordinator's Connect JSON API (and, for one node, the agent's
// NodeService through the coordinator's read-only proxy); the server never
// renders data into the page. DOM is built with textContent only.
"use strict";

const TOKEN_KEY = "slackline.token";
const CLUSTER_PERIOD_MS = 2000;
const NODE_PERIOD_MS = 1000;
const WINDOW_SECONDS = 120; // the span of the node view's charts and timeline
const MAX_USAGE_AGENTS = 50; // agents whose usage the cluster view fetches

// ---- API ------------------------------------------------------------------

class RPCError extends Error {
  constructor(code, message, status) {
    super(message || code);
    this.code = code;
    this.status = status;
  }
}

// rpc calls a Connect unary method with JSON and returns the decoded answer.
async function rpc(path, body) {
  const headers = { "Content-Type": "application/json", "Connect-Protocol-Version": "1" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(path, { method: "POST", headers, body: JSON.stringify(body || {}), cache: "no-store" });
  const text = await resp.text();
  let data = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch (e) {
    throw new RPCError("unknown", `${path}: HTTP ${resp.status}: ${text.slice(0, 200)}`, resp.status);
  }
  if (!resp.ok) throw new RPCError(data.code || "unknown", data.message || `HTTP ${resp.status}`, resp.status);
  return data;
}

const operator = (method, body) => rpc(`/slackline.v1.OperatorService/${method}`, body);
const node = (agentID, method) => rpc(`/ui/node/${encodeURIComponent(agentID)}/slackline.v1.NodeService/${method}`, {});

// ---- helpers --------------------------------------------------------------

// el builds an element: el("td", {class: "x", dataset: {id: 1}}, child, "text").
function el(tag, attrs, ...children) {
  const svg = ["svg", "polyline", "line", "circle", "text", "rect", "g", "title", "path"].includes(tag);
  const e = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "text") e.textContent = v;
    else if (k === "width") e.style.width = v; // CSSOM: allowed by the page's CSP, unlike style attributes
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
  return e;
}

const short = (name, prefix) => (name || "").replace(prefix, "");

// scalars sums the scalar resources of a list by name (regular only, or
// revocable only when revocable is true; undefined: both).
function scalars(list, revocable) {
  const out = {};
  for (const r of list || []) {
    if (revocable !== undefined && Boolean(r.revocable) !== revocable) continue;
    if (r.scalar === undefined && r.ranges) continue;
    out[r.name] = (out[r.name] || 0) + (Number(r.scalar) || 0);
  }
  return out;
}

function fmt(v, digits = 2) {
  if (v === undefined || v === null || Number.isNaN(v)) return "–";
  if (Math.abs(v) >= 100) return v.toFixed(0);
  return Number(v.toFixed(digits)).toString();
}

function fmtMiB(mib) {
  if (mib === undefined || Number.isNaN(mib)) return "–";
  return mib >= 1024 ? fmt(mib / 1024, 1) + " GiB" : fmt(mib, 0) + " MiB";
}

function fmtSeconds(s) {
  if (s === undefined || s === null || Number.isNaN(s)) return "–";
  if (s < 1e-3) return fmt(s * 1e6, 0) + " µs";
  if (s < 1) return fmt(s * 1e3, 1) + " ms";
  return fmt(s, 2) + " s";
}

const ts = (t) => (t ? Date.parse(t) / 1000 : undefined);

function setStatus(text, isError) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

function explain(err) {
  if (err instanceof RPCError && (err.code === "unauthenticated" || err.status === 401))
    return "The coordinator wants an operator token: enter it above (kept in this tab only).";
  if (err instanceof RPCError && (err.code === "permission_denied" || err.status === 403))
    return "This token may not read the cluster state: " + err.message;
  return String(err.message || err);
}

// bar draws used/allocated/total as a small horizontal bar.
function bar(allocated, total, used, revocable) {
  const pct = (v) => (total > 0 ? Math.max(0, Math.min(100, (100 * v) / total)) : 0);
  return el("div", { class: "bar", title: `allocated ${fmt(allocated)} of ${fmt(total)}; used ${fmt(used)}; revocable ${fmt(revocable)}` },
    el("div", { class: "alloc", width: `${pct(allocated)}%` }),
    used === undefined ? null : el("div", { class: "used", width: `${pct(used)}%` }));
}

// ---- cluster view ---------------------------------------------------------

async function agentUsage(agents) {
  const out = {};
  const active = agents.filter((a) => a.state === "AGENT_STATE_ACTIVE" && a.endpoint).slice(0, MAX_USAGE_AGENTS);
  await Promise.all(active.map(async (a) => {
    try {
      const u = await node(a.id, "GetUsage");
      let cpu = 0, mem = 0;
      for (const c of u.usage || []) {
        cpu += Number(c.statistics?.cpusRate || 0);
        mem += Number(c.statistics?.memRssBytes || 0) / (1 << 20);
      }
      out[a.id] = { cpu, mem };
    } catch (e) {
      out[a.id] = { error: explain(e) };
    }
  }));
  return out;
}

async function renderCluster(view) {
  const state = await operator("GetState");
  let maint;
  try {
    maint = await operator("GetMaintenanceStatus");
  } catch (err) {
    // A follower of a highly available group answers GetState with the
    // leader's address and everything else with unavailable.
    if (err.code === "unavailable" && state.leaderUrl)
      throw new RPCError("unavailable", `This coordinator is a follower: the leader is ${state.leaderUrl} (its /ui/ shows the cluster).`);
    throw err;
  }
  const agents = (state.agents || []).slice().sort((a, b) => (a.hostname || "").localeCompare(b.hostname || ""));
  const usage = await agentUsage(agents);
  const hostOf = Object.fromEntries(agents.map((a) => [a.id, a.hostname]));
  const fwName = Object.fromEntries((state.frameworks || []).map((f) => [f.info?.id, f.info?.name]));
  const extra = new Set();
  for (const a of agents) for (const n of Object.keys(scalars(a.resources))) if (!["cpus", "mem", "disk"].includes(n)) extra.add(n);

  const agentRows = agents.map((a) => {
    const total = scalars(a.resources), alloc = scalars(a.allocated), est = scalars(a.revocable), allocRev = scalars(a.allocatedRevocable);
    const u = usage[a.id] || {};
    const tasks = (state.tasks || []).filter((t) => t.agentId === a.id && t.state === "TASK_STATE_RUNNING").length;
    return el("tr", { dataset: { agentId: a.id, hostname: a.hostname || "" } },
      el("td", {}, el("a", { href: `#/agents/${encodeURIComponent(a.id)}`, class: "hostname", text: a.hostname || a.id })),
      el("td", { class: "state " + short(a.state, "AGENT_STATE_").toLowerCase(), text: short(a.state, "AGENT_STATE_") }),
      el("td", { class: "mode " + short(a.mode, "MACHINE_MODE_").toLowerCase(), text: short(a.mode, "MACHINE_MODE_") || "UP" }),
      el("td", { class: "num" }, `${fmt(alloc.cpus || 0)} / ${fmt(total.cpus || 0)}`, bar(alloc.cpus || 0, total.cpus || 0, u.cpu, est.cpus)),
      el("td", { class: "num", title: u.error || "" , text: u.error ? "?" : fmt(u.cpu) }),
      el("td", { class: "num", text: `${fmt(allocRev.cpus || 0)} / ${fmt(est.cpus || 0)}` }),
      el("td", { class: "num" }, `${fmtMiB(alloc.mem || 0)} / ${fmtMiB(total.mem || 0)}`, bar(alloc.mem || 0, total.mem || 0, u.mem, est.mem)),
      el("td", { class: "num", text: u.error ? "?" : fmtMiB(u.mem) }),
      el("td", { class: "num", text: `${fmtMiB(allocRev.mem || 0)} / ${fmtMiB(est.mem || 0)}` }),
      [...extra].map((n) => el("td", { class: "num", text: `${fmt(alloc[n] || 0)} / ${fmt(total[n] || 0)}` + (est[n] ? ` (rev ${fmt(allocRev[n] || 0)} / ${fmt(est[n])})` : "") })),
      el("td", { class: "num", text: tasks }));
  });

  const frameworkRows = (state.frameworks || []).map((f) => {
    const alloc = scalars(f.allocated);
    const running = (state.tasks || []).filter((t) => t.frameworkId === f.info?.id && t.state === "TASK_STATE_RUNNING").length;
    return el("tr", { dataset: { frameworkId: f.info?.id || "" } },
      el("td", { text: f.info?.name || "" }), el("td", { class: "id", text: f.info?.id || "" }),
      el("td", { text: short(f.state, "FRAMEWORK_STATE_") }), el("td", { text: (f.info?.roles || ["*"]).join(", ") }),
      el("td", { class: "num", text: fmt(alloc.cpus || 0) }), el("td", { class: "num", text: fmtMiB(alloc.mem || 0) }),
      el("td", { class: "num", text: running }));
  });

  const live = (state.tasks || []).filter((t) => !["TASK_STATE_FINISHED", "TASK_STATE_FAILED", "TASK_STATE_KILLED", "TASK_STATE_ERROR", "TASK_STATE_LOST", "TASK_STATE_DROPPED", "TASK_STATE_GONE", "TASK_STATE_GONE_BY_OPERATOR"].includes(t.state));
  const taskRows = live.slice(0, 200).map((t) => {
    const revocable = (t.resources || []).some((r) => r.revocable);
    return el("tr", { dataset: { taskId: t.taskId, state: t.state } },
      el("td", { text: t.name || "" }), el("td", { class: "id", text: t.taskId }),
      el("td", { text: fwName[t.frameworkId] || t.frameworkId || "" }),
      el("td", {}, el("a", { href: `#/agents/${encodeURIComponent(t.agentId || "")}`, text: hostOf[t.agentId] || t.agentId || "" })),
      el("td", { class: "state " + short(t.state, "TASK_STATE_").toLowerCase(), text: short(t.state, "TASK_STATE_") }),
      el("td", { text: revocable ? "revocable" : "guaranteed" }));
  });

  const status = maint.status || {};
  const drainRows = (status.drainingMachines || []).map((m) =>
    el("tr", {}, el("td", { text: m.id?.hostname || m.id?.ip || "" }), el("td", { text: "DRAINING" }),
      el("td", { text: m.unavailability?.start ? new Date(m.unavailability.start).toLocaleString() : "" }),
      el("td", { text: (m.statuses || []).map((s) => `${s.frameworkName || s.frameworkId}: ${short(s.status, "INVERSE_OFFER_STATUS_")}${s.breaksMinAvailable ? " (breaks min available)" : ""}`).join("; ") })));
  const downRows = (status.downMachines || []).map((m) =>
    el("tr", {}, el("td", { text: m.hostname || m.ip || "" }), el("td", { text: "DOWN" }), el("td"), el("td")));

  view.replaceChildren(
    el("h1", { text: "Cluster" }),
    el("section", { id: "agents" }, el("h2", { text: `Agents (${agents.length})` }),
      el("table", {}, el("thead", {}, el("tr", {},
        ["Hostname", "State", "Mode", "CPU alloc / total", "CPU used", "CPU revocable alloc / est.", "Mem alloc / total", "Mem used", "Mem revocable alloc / est.", ...[...extra].map((n) => `${n} alloc / total`), "Running"].map((h) => el("th", { text: h })))),
      el("tbody", {}, agentRows)),
      agents.length > MAX_USAGE_AGENTS ? el("p", { class: "note", text: `Usage is fetched for the first ${MAX_USAGE_AGENTS} active agents only.` }) : null),
    el("section", { id: "frameworks" }, el("h2", { text: `Frameworks (${frameworkRows.length})` }),
      el("table", {}, el("thead", {}, el("tr", {}, ["Name", "Id", "State", "Roles", "CPU", "Mem", "Running"].map((h) => el("th", { text: h })))),
        el("tbody", {}, frameworkRows))),
    el("section", { id: "tasks" }, el("h2", { text: `Live tasks (${live.length})` }),
      el("table", {}, el("thead", {}, el("tr", {}, ["Name", "Id", "Framework", "Agent", "State", "Kind"].map((h) => el("th", { text: h })))),
        el("tbody", {}, taskRows)),
      live.length > taskRows.length ? el("p", { class: "note", text: `${live.length - taskRows.length} more not shown.` }) : null),
    el("section", { id: "maintenance" }, el("h2", { text: "Maintenance" }),
      drainRows.length + downRows.length === 0 ? el("p", { class: "note", text: "Every machine is UP." }) :
        el("table", {}, el("thead", {}, el("tr", {}, ["Machine", "Mode", "Window starts", "Framework answers"].map((h) => el("th", { text: h })))),
          el("tbody", {}, drainRows, downRows))));
  return `${agents.length} agents, ${(state.frameworks || []).length} frameworks`;
}

// ---- node view ------------------------------------------------------------

// history keeps, per container, the samples of the last WINDOW_SECONDS.
const history = new Map(); // task id -> [{t, cpu, p99, delay, delayedTotal}]

function record(taskID, st) {
  const t = ts(st.timestamp);
  if (t === undefined) return;
  const h = history.get(taskID) || [];
  const last = h[h.length - 1];
  if (last && last.t === t) return;
  const delayedTotal = Number(st.delayedByRevocableSecs || 0);
  const delay = last && t > last.t ? Math.max(0, (delayedTotal - last.delayedTotal) / (t - last.t)) : undefined;
  h.push({ t, cpu: Number(st.cpusRate || 0), p99: st.runqueue ? Number(st.runqueue.p99Seconds || 0) : undefined, delay, delayedTotal });
  while (h.length && h[0].t < t - WINDOW_SECONDS) h.shift();
  history.set(taskID, h);
}

const W = 360, H = 80, PAD = 2;

// chart draws one series of {t, v} in the window ending at now.
function chart(metric, points, now, unit, format) {
  const vals = points.filter((p) => p.v !== undefined && !Number.isNaN(p.v));
  const ymax = Math.max(unit.min, ...vals.map((p) => p.v)) * 1.1;
  const x = (t) => PAD + ((W - 2 * PAD) * (t - (now - WINDOW_SECONDS))) / WINDOW_SECONDS;
  const y = (v) => H - PAD - ((H - 2 * PAD) * v) / ymax;
  const pts = vals.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" ");
  const latest = vals.length ? vals[vals.length - 1].v : undefined;
  return el("figure", { class: "chart" },
    el("figcaption", {}, el("span", { text: unit.label }), el("span", { class: "latest", text: format(latest) })),
    el("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", dataset: { metric, points: vals.length } },
      el("line", { x1: 0, y1: H - PAD, x2: W, y2: H - PAD, class: "axis" }),
      el("text", { x: 4, y: 12, class: "ymax", text: format(ymax) }),
      el("polyline", { points: pts, class: metric })));
}

// limitText is what a correction set: cores, memory.high or an I/O cap.
function limitText(c) {
  if (c.cpuLimit) return fmt(c.cpuLimit) + " cpus";
  if (c.memoryHighBytes && Number(c.memoryHighBytes) > 0) return fmtMiB(Number(c.memoryHighBytes) / (1 << 20)) + " high";
  if (c.ioLimitBytesPerSecond) return fmt(c.ioLimitBytesPerSecond / (1 << 20)) + " MiB/s";
  if (c.bandwidthLimitMbps) return fmt(c.bandwidthLimitMbps) + " Mbit/s";
  return "";
}

// timeline draws QoS corrections in the window ending at now.
function timeline(corrections, now) {
  const x = (t) => PAD + ((W * 2 - 2 * PAD) * (t - (now - WINDOW_SECONDS))) / WINDOW_SECONDS;
  const marks = corrections.filter((c) => ts(c.timestamp) >= now - WINDOW_SECONDS).map((c) => {
    const t = ts(c.timestamp);
    const kind = short(c.kind, "CORRECTION_KIND_").toLowerCase();
    return el("g", { class: "correction " + kind, dataset: { kind: c.kind, t: String(t) } },
      el("line", { x1: x(t), x2: x(t), y1: 8, y2: 52 }),
      el("circle", { cx: x(t), cy: kind === "kill" ? 44 : kind === "unthrottle" || kind === "thaw" || kind === "release" ? 30 : 16, r: 5 }),
      el("title", { text: `${new Date(t * 1000).toLocaleTimeString()} ${short(c.kind, "CORRECTION_KIND_")} ${c.taskId || "revocable subtree"}${c.cpuLimit ? " to " + fmt(c.cpuLimit) + " cpus" : ""}: ${c.reason || ""}` }));
  });
  return el("svg", { id: "qos-timeline", viewBox: `0 0 ${W * 2} 60`, preserveAspectRatio: "none", dataset: { corrections: marks.length } },
    el("line", { x1: 0, x2: W * 2, y1: 52, y2: 52, class: "axis" }),
    el("text", { x: 4, y: 59, class: "tick", text: `−${WINDOW_SECONDS}s` }),
    el("text", { x: W * 2 - 28, y: 59, class: "tick", text: "now" }),
    marks);
}

let nodeAgentID = null;

async function renderNode(view, agentID) {
  if (nodeAgentID !== agentID) {
    history.clear();
    nodeAgentID = agentID;
  }
  const [agents, containers, usage, corrections, estimate] = await Promise.all([
    operator("GetAgents"), node(agentID, "GetContainers"), node(agentID, "GetUsage"),
    node(agentID, "GetCorrections"), node(agentID, "GetEstimate").catch(() => ({})),
  ]);
  const agent = (agents.agents || []).find((a) => a.id === agentID) || { id: agentID };
  const stats = Object.fromEntries((usage.usage || []).map((u) => [u.taskId, u.statistics || {}]));
  let now = 0;
  for (const [task, st] of Object.entries(stats)) {
    record(task, st);
    now = Math.max(now, ts(st.timestamp) || 0);
  }
  if (usage.node?.timestamp) now = Math.max(now, ts(usage.node.timestamp));
  if (!now) now = Date.now() / 1000;

  const list = (containers.containers || []).slice().sort((a, b) => Number(a.revocable || false) - Number(b.revocable || false) || a.taskId.localeCompare(b.taskId));
  const cards = list.map((c) => {
    const h = history.get(c.taskId) || [];
    const st = stats[c.taskId] || {};
    return el("section", { class: "container" + (c.revocable ? " revocable" : ""), dataset: { taskId: c.taskId, containerId: c.containerId || "", state: c.state || "", revocable: String(Boolean(c.revocable)) } },
      el("h3", {}, el("span", { class: "id", text: c.taskId }), " ",
        el("span", { class: "badge", text: c.revocable ? "revocable" : "guaranteed" }), " ",
        el("span", { class: "state " + short(c.state, "TASK_STATE_").toLowerCase(), text: short(c.state, "TASK_STATE_") || "UNKNOWN" })),
      el("p", { class: "meta", text: `framework ${c.frameworkId} · cgroup ${c.cgroupPath} · pid ${c.pid || "–"} · RSS ${fmtMiB(Number(st.memRssBytes || 0) / (1 << 20))} · working set ${fmtMiB(Number(st.memWorkingSetBytes || 0) / (1 << 20))} · mem PSI ${fmt(st.memoryPressure?.someAvg10 || 0)}% · io PSI ${fmt(st.ioPressure?.someAvg10 || 0)}%` }),
      el("div", { class: "charts" },
        chart("cpu", h.map((p) => ({ t: p.t, v: p.cpu })), now, { label: "CPU (cores)", min: 0.05 }, (v) => fmt(v)),
        chart("runqueue-p99", h.map((p) => ({ t: p.t, v: p.p99 })), now, { label: "run-queue p99", min: 1e-4 }, fmtSeconds),
        c.revocable ? null : chart("delayed-by-revocable", h.map((p) => ({ t: p.t, v: p.delay })), now, { label: "delayed by revocable (s/s)", min: 0.001 }, (v) => fmt(v, 3))));
  });

  const corr = corrections.corrections || [];
  const recent = corr.slice(-20).reverse().map((c) =>
    el("tr", { dataset: { kind: c.kind } },
      el("td", { text: c.timestamp ? new Date(c.timestamp).toLocaleTimeString() : "" }),
      el("td", { class: "kind " + short(c.kind, "CORRECTION_KIND_").toLowerCase(), text: short(c.kind, "CORRECTION_KIND_") }),
      el("td", { text: c.controller || "" }), el("td", { text: c.taskId || "revocable subtree" }),
      el("td", { class: "num", text: limitText(c) }),
      el("td", { class: "num", text: fmtSeconds(c.reactionSeconds) }), el("td", { text: c.reason || "" })));

  const total = scalars(agent.resources), est = scalars(estimate.revocable);
  const ns = usage.node || {};
  view.replaceChildren(
    el("h1", {}, el("span", { class: "hostname", text: agent.hostname || agentID }), " ",
      el("span", { class: "state", text: short(agent.state, "AGENT_STATE_") }), " ",
      el("span", { class: "mode", text: short(agent.mode, "MACHINE_MODE_") })),
    el("p", { class: "meta", text: `agent ${agentID} · ${fmt(total.cpus || 0)} cpus, ${fmtMiB(total.mem || 0)} · node CPU used ${fmt(ns.cpusRate)} · load ${fmt(ns.loadAvg1)} · revocable estimate ${fmt(est.cpus || 0)} cpus, ${fmtMiB(est.mem || 0)} (${estimate.estimator || "?"}) · node mem PSI ${fmt(ns.memoryPressure?.someAvg10 || 0)}%, io PSI ${fmt(ns.ioPressure?.someAvg10 || 0)}%` }),
    el("section", { id: "qos" }, el("h2", { text: "QoS corrections" }), timeline(corr, now),
      recent.length ? el("table", {}, el("thead", {}, el("tr", {}, ["Time", "Kind", "Controller", "Target", "Limit", "Reaction", "Reason"].map((h) => el("th", { text: h })))), el("tbody", {}, recent))
        : el("p", { class: "note", text: "No corrections yet." })),
    el("section", { id: "containers" }, el("h2", { text: `Containers (${list.length})` }),
      cards.length ? cards : el("p", { class: "note", text: "No containers on this agent." })));
  return `${agent.hostname || agentID}: ${list.length} containers`;
}

// ---- loop -----------------------------------------------------------------

function route() {
  const m = location.hash.match(/^#\/agents\/(.+)$/);
  return m ? { view: "node", agent: decodeURIComponent(m[1]) } : { view: "cluster" };
}

let timer = null;
let generation = 0;

async function refresh() {
  const gen = ++generation;
  clearTimeout(timer);
  const r = route();
  const crumbs = document.getElementById("crumbs");
  crumbs.replaceChildren(el("a", { href: "#/", text: "Cluster" }), ...(r.view === "node" ? [el("span", { text: " › node" })] : []));
  const view = document.getElementById("view");
  try {
    const summary = r.view === "node" ? await renderNode(view, r.agent) : await renderCluster(view);
    if (gen !== generation) return;
    setStatus(`${summary} · updated ${new Date().toLocaleTimeString()}`, false);
  } catch (err) {
    if (gen !== generation) return;
    setStatus(explain(err), true);
  }
  timer = setTimeout(refresh, r.view === "node" ? NODE_PERIOD_MS : CLUSTER_PERIOD_MS);
}

function setupToken() {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token");
  const show = () => { input.placeholder = sessionStorage.getItem(TOKEN_KEY) ? "set (hidden)" : "not set"; };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const v = input.value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    input.value = "";
    show();
    refresh();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    input.value = "";
    show();
    refresh();
  });
  show();
}

window.addEventListener("hashchange", refresh);
document.addEventListener("DOMContentLoaded", () => {
  setupToken();
  refresh();
});
