// Slackline live view. Everything shown is fetched by this script from the
// coordinator's Connect JSON API (and, for one node, the agent's
// NodeService through the coordinator's read-only proxy); the server never
// renders data into the page. DOM is built with textContent only; charts
// are drawn by uPlot (vendor/uplot, MIT).
"use strict";

const TOKEN_KEY = "slackline.token";
const CLUSTER_PERIOD_MS = 2000;
const NODE_PERIOD_MS = 1000;
const LOGS_PERIOD_MS = 2000;
const HISTORY_STEP_SECONDS = 1; // the charts' resolution (the agent keeps finer)
const WINDOW_SECONDS = 900; // the charts' span: the agent's history window
const TIMELINE_SECONDS = 120; // the QoS timeline's span
const MAX_USAGE_AGENTS = 50; // agents whose usage the cluster view fetches
const MAX_ROWS = 500; // rows a table draws (after filtering)
const LOG_BYTES = 64 << 10; // the tail of stdout/stderr shown
const TERMINAL = ["TASK_STATE_FINISHED", "TASK_STATE_FAILED", "TASK_STATE_KILLED", "TASK_STATE_ERROR", "TASK_STATE_LOST", "TASK_STATE_DROPPED", "TASK_STATE_GONE", "TASK_STATE_GONE_BY_OPERATOR"];

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
const node = (agentID, method, body) => rpc(`/ui/node/${encodeURIComponent(agentID)}/slackline.v1.NodeService/${method}`, body || {});

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
    else if (k === "onclick") e.addEventListener("click", v);
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

// resourceText shows scalar resources as "cpus 2, mem 1 GiB".
function resourceText(list) {
  const s = scalars(list);
  return Object.keys(s).sort().map((n) => (n === "mem" || n === "disk" ? `${n} ${fmtMiB(s[n])}` : `${n} ${fmt(s[n])}`)).join(", ");
}

function fmt(v, digits = 2) {
  if (v === undefined || v === null || Number.isNaN(v)) return "–";
  if (Math.abs(v) >= 100) return v.toFixed(0);
  return Number(v.toFixed(digits)).toString();
}

function fmtMiB(mib) {
  if (mib === undefined || mib === null || Number.isNaN(mib)) return "–";
  return mib >= 1024 ? fmt(mib / 1024, 1) + " GiB" : fmt(mib, 0) + " MiB";
}

const fmtBytes = (b) => (b === undefined || b === null ? "–" : b >= 1 << 20 || b === 0 ? fmtMiB(b / (1 << 20)) : fmt(b / 1024, 0) + " KiB");

function fmtSeconds(s) {
  if (s === undefined || s === null || Number.isNaN(s)) return "–";
  if (s === 0) return "0";
  if (s < 1e-3) return fmt(s * 1e6, 0) + " µs";
  if (s < 1) return fmt(s * 1e3, 1) + " ms";
  return fmt(s, 2) + " s";
}

const ts = (t) => (t ? Date.parse(t) / 1000 : undefined);
const timeText = (t) => (t ? new Date(t).toLocaleString() : "");

function setStatus(text, isError) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

function explain(err) {
  if (err instanceof RPCError && (err.code === "unauthenticated" || err.status === 401))
    return "The coordinator wants an operator token: enter it above (kept in this tab only; under make run it is the line in .run/credentials/admin.token).";
  if (err instanceof RPCError && (err.code === "permission_denied" || err.status === 403))
    return "This token may not read this: " + err.message;
  return String(err.message || err);
}

// bar draws used/allocated/total as a small horizontal bar.
function bar(allocated, total, used, revocable) {
  const pct = (v) => (total > 0 ? Math.max(0, Math.min(100, (100 * v) / total)) : 0);
  return el("div", { class: "bar", title: `allocated ${fmt(allocated)} of ${fmt(total)}; used ${fmt(used)}; revocable ${fmt(revocable)}` },
    el("div", { class: "alloc", width: `${pct(allocated)}%` }),
    used === undefined ? null : el("div", { class: "used", width: `${pct(used)}%` }));
}

// ---- sortable, filterable tables -------------------------------------------

const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
const tableState = new Map(); // table id -> {col, dir, filter}: kept across refreshes and views

// Table is a section with a title, a filter field and a table whose rows
// sort by a click on a header (again: reverse). It is built once per view;
// update() redraws the rows only, so the filter field keeps its focus.
// A row is {cells: [{text, sort, node, class}], dataset}; sort is a number
// or a string (compared naturally: batch-2 before batch-10).
class Table {
  constructor(id, title, columns, note) {
    this.id = id;
    this.title = title;
    this.columns = columns;
    this.state = tableState.get(id) || { col: -1, dir: 1, filter: "" };
    tableState.set(id, this.state);
    this.heading = el("h2", { text: title });
    this.filter = el("input", { type: "search", class: "filter", placeholder: "filter", "aria-label": `filter ${title}`, spellcheck: "false" });
    this.filter.value = this.state.filter;
    this.filter.addEventListener("input", () => { this.state.filter = this.filter.value; this.draw(); });
    this.ths = columns.map((c, i) => el("th", { text: c, title: "sort", onclick: () => this.sortBy(i) }));
    this.body = el("tbody");
    this.note = el("p", { class: "note", text: note || "" });
    this.section = el("section", { id }, el("div", { class: "table-head" }, this.heading, this.filter),
      el("table", {}, el("thead", {}, el("tr", {}, this.ths)), this.body), this.note);
    this.rows = [];
  }

  sortBy(i) {
    this.state.dir = this.state.col === i ? -this.state.dir : 1;
    this.state.col = i;
    this.draw();
  }

  update(rows, note) {
    this.rows = rows;
    if (note !== undefined) this.note.textContent = note;
    this.draw();
  }

  draw() {
    const { col, dir } = this.state;
    const needle = this.state.filter.trim().toLowerCase();
    let rows = this.rows;
    if (needle) rows = rows.filter((r) => r.cells.some((c) => String(c.text ?? "").toLowerCase().includes(needle)));
    if (col >= 0) {
      const key = (r) => { const c = r.cells[col] || {}; return c.sort !== undefined ? c.sort : String(c.text ?? ""); };
      rows = rows.slice().sort((a, b) => {
        const x = key(a), y = key(b);
        const d = typeof x === "number" && typeof y === "number" ? x - y : collator.compare(String(x), String(y));
        return dir * d;
      });
    }
    this.ths.forEach((th, i) => {
      if (i === col) th.dataset.sort = dir > 0 ? "asc" : "desc"; else delete th.dataset.sort;
      th.setAttribute("aria-sort", i === col ? (dir > 0 ? "ascending" : "descending") : "none");
    });
    const shown = rows.slice(0, MAX_ROWS);
    this.body.replaceChildren(...shown.map((r) => el("tr", { dataset: r.dataset },
      r.cells.map((c) => el("td", { class: c.class, title: c.title }, c.node !== undefined ? c.node : String(c.text ?? ""))))));
    const total = this.rows.length;
    this.heading.textContent = `${this.title} (${needle ? `${rows.length} of ${total}` : total})` + (rows.length > shown.length ? `, first ${shown.length} shown` : "");
    this.section.dataset.rows = String(shown.length);
  }
}

const cell = (text, sort, cls) => ({ text, sort, class: cls });
const num = (text, sort) => ({ text, sort, class: "num" });
const link = (text, href, cls) => ({ text, node: el("a", { href, class: cls, text }) });

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

const logsHref = (t) => `#/logs/${encodeURIComponent(t.agentId || "")}/${encodeURIComponent(t.frameworkId || "")}/${encodeURIComponent(t.taskId || "")}`;

let cluster = null; // the cluster view's tables, built once per visit

function clusterTables(view) {
  cluster = {
    agents: new Table("agents", "Agents", ["Hostname", "State", "Mode", "CPU alloc / total", "CPU used", "CPU revocable alloc / est.", "Mem alloc / total", "Mem used", "Mem revocable alloc / est.", "Offered", "Running"]),
    roles: new Table("roles", "Roles", ["Role", "Weight", "Quota", "Allocated", "Dominant share", "Frameworks"]),
    offers: new Table("offers", "Outstanding offers", ["Framework", "Agent", "Offered"]),
    frameworks: new Table("frameworks", "Frameworks", ["Name", "Id", "State", "Roles", "CPU", "Mem", "Offered", "Running"]),
    tasks: new Table("tasks", "Live tasks", ["Name", "Id", "Framework", "Agent", "State", "Kind", "Resources", "Output"]),
    completed: new Table("completed-tasks", "Completed tasks", ["Name", "Id", "Framework", "Agent", "State", "Reason", "Message", "Output"]),
    doneFrameworks: new Table("completed-frameworks", "Completed frameworks", ["Name", "Id", "Roles", "Registered", "Disconnected"]),
    maintenance: new Table("maintenance", "Maintenance and inverse offers", ["Machine", "Mode", "Window starts", "Framework", "Answer"]),
  };
  view.replaceChildren(el("h1", { text: "Cluster" }), ...Object.values(cluster).map((t) => t.section));
}

async function renderCluster(view, fresh) {
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
  if (fresh || !cluster) clusterTables(view);
  const agents = state.agents || [];
  const usage = await agentUsage(agents);
  const hostOf = Object.fromEntries(agents.map((a) => [a.id, a.hostname]));
  const fwName = Object.fromEntries((state.frameworks || []).map((f) => [f.info?.id, f.info?.name]));
  const tasks = state.tasks || [];

  cluster.agents.update(agents.map((a) => {
    const total = scalars(a.resources), alloc = scalars(a.allocated), est = scalars(a.revocable), allocRev = scalars(a.allocatedRevocable);
    const u = usage[a.id] || {};
    const running = tasks.filter((t) => t.agentId === a.id && t.state === "TASK_STATE_RUNNING").length;
    return {
      dataset: { agentId: a.id, hostname: a.hostname || "" },
      cells: [
        link(a.hostname || a.id, `#/agents/${encodeURIComponent(a.id)}`, "hostname"),
        cell(short(a.state, "AGENT_STATE_"), undefined, "state " + short(a.state, "AGENT_STATE_").toLowerCase()),
        cell(short(a.mode, "MACHINE_MODE_") || "UP", undefined, "mode " + (short(a.mode, "MACHINE_MODE_") || "UP").toLowerCase()),
        { text: `${fmt(alloc.cpus || 0)} / ${fmt(total.cpus || 0)}`, sort: alloc.cpus || 0, class: "num",
          node: el("span", {}, `${fmt(alloc.cpus || 0)} / ${fmt(total.cpus || 0)}`, bar(alloc.cpus || 0, total.cpus || 0, u.cpu, est.cpus)) },
        { text: u.error ? "?" : fmt(u.cpu), sort: u.cpu ?? -1, class: "num", title: u.error || "" },
        num(`${fmt(allocRev.cpus || 0)} / ${fmt(est.cpus || 0)}`, est.cpus || 0),
        { text: `${fmtMiB(alloc.mem || 0)} / ${fmtMiB(total.mem || 0)}`, sort: alloc.mem || 0, class: "num",
          node: el("span", {}, `${fmtMiB(alloc.mem || 0)} / ${fmtMiB(total.mem || 0)}`, bar(alloc.mem || 0, total.mem || 0, u.mem, est.mem)) },
        num(u.error ? "?" : fmtMiB(u.mem), u.mem ?? -1),
        num(`${fmtMiB(allocRev.mem || 0)} / ${fmtMiB(est.mem || 0)}`, est.mem || 0),
        cell(resourceText(a.offered)),
        num(String(running), running),
      ],
    };
  }), agents.length > MAX_USAGE_AGENTS ? `Usage is fetched for the first ${MAX_USAGE_AGENTS} active agents only.` : "");

  cluster.roles.update((state.roles || []).map((r) => ({
    dataset: { role: r.name },
    cells: [cell(r.name), num(fmt(r.weight ?? 1), Number(r.weight ?? 1)), cell(resourceText(r.quota?.limits) || "none"),
      cell(resourceText(r.allocated)), num(fmt(r.dominantShare || 0, 3), Number(r.dominantShare || 0)),
      cell((r.frameworkIds || []).map((id) => fwName[id] || id).join(", "))],
  })), "Allocated includes outstanding offers; the dominant share is weighted.");

  cluster.offers.update([
    ...(state.frameworks || []).filter((f) => (f.offered || []).length).map((f) => ({
      dataset: { frameworkId: f.info?.id || "" }, cells: [cell(f.info?.name || f.info?.id), cell("(all agents)"), cell(resourceText(f.offered))] })),
    ...agents.filter((a) => (a.offered || []).length).map((a) => ({
      dataset: { agentId: a.id }, cells: [cell("(all frameworks)"), cell(a.hostname || a.id), cell(resourceText(a.offered))] })),
  ], "Resources offered and neither accepted nor declined yet, by framework and by agent.");

  const live = (state.frameworks || []).filter((f) => f.state !== "FRAMEWORK_STATE_COMPLETED");
  cluster.frameworks.update(live.map((f) => {
    const alloc = scalars(f.allocated);
    const running = tasks.filter((t) => t.frameworkId === f.info?.id && t.state === "TASK_STATE_RUNNING").length;
    return {
      dataset: { frameworkId: f.info?.id || "" },
      cells: [cell(f.info?.name || ""), cell(f.info?.id || "", undefined, "id"), cell(short(f.state, "FRAMEWORK_STATE_")),
        cell((f.info?.roles || ["*"]).join(", ")), num(fmt(alloc.cpus || 0), alloc.cpus || 0), num(fmtMiB(alloc.mem || 0), alloc.mem || 0),
        cell(resourceText(f.offered)), num(String(running), running)],
    };
  }));
  cluster.doneFrameworks.update((state.frameworks || []).filter((f) => f.state === "FRAMEWORK_STATE_COMPLETED").map((f) => ({
    dataset: { frameworkId: f.info?.id || "" },
    cells: [cell(f.info?.name || ""), cell(f.info?.id || "", undefined, "id"), cell((f.info?.roles || ["*"]).join(", ")),
      cell(timeText(f.registeredTime), ts(f.registeredTime) || 0), cell(timeText(f.disconnectedTime), ts(f.disconnectedTime) || 0)],
  })));

  const taskCells = (t) => [cell(t.name || ""), cell(t.taskId, undefined, "id"), cell(fwName[t.frameworkId] || t.frameworkId || ""),
    link(hostOf[t.agentId] || t.agentId || "", `#/agents/${encodeURIComponent(t.agentId || "")}`)];
  const stateCell = (t) => cell(short(t.state, "TASK_STATE_"), undefined, "state " + short(t.state, "TASK_STATE_").toLowerCase());
  const logsCell = (t) => (t.agentId ? { text: "logs", node: el("a", { href: logsHref(t), class: "logs", text: "stdout/stderr" }) } : cell(""));
  cluster.tasks.update(tasks.filter((t) => !TERMINAL.includes(t.state)).map((t) => ({
    dataset: { taskId: t.taskId, state: t.state },
    cells: [...taskCells(t), stateCell(t), cell((t.resources || []).some((r) => r.revocable) ? "revocable" : "guaranteed"),
      cell(resourceText(t.resources)), logsCell(t)],
  })));
  cluster.completed.update(tasks.filter((t) => TERMINAL.includes(t.state)).map((t) => ({
    dataset: { taskId: t.taskId, state: t.state },
    cells: [...taskCells(t), stateCell(t), cell(short(t.status?.reason, "REASON_")), cell(t.status?.message || ""), logsCell(t)],
  })), "The coordinator keeps a bounded number of completed tasks.");

  const status = maint.status || {};
  const rows = [];
  for (const m of status.drainingMachines || []) {
    const host = m.id?.hostname || m.id?.ip || "";
    const start = m.unavailability?.start;
    const answers = m.statuses || [];
    if (!answers.length) rows.push({ dataset: { machine: host }, cells: [cell(host), cell("DRAINING"), cell(timeText(start), ts(start) || 0), cell(""), cell("no framework asked")] });
    for (const s of answers)
      rows.push({ dataset: { machine: host }, cells: [cell(host), cell("DRAINING"), cell(timeText(start), ts(start) || 0), cell(s.frameworkName || s.frameworkId || ""),
        cell(short(s.status, "INVERSE_OFFER_STATUS_") + (s.breaksMinAvailable ? " (breaks min available)" : ""))] });
  }
  for (const m of status.downMachines || []) rows.push({ dataset: { machine: m.hostname || m.ip || "" }, cells: [cell(m.hostname || m.ip || ""), cell("DOWN"), cell(""), cell(""), cell("")] });
  cluster.maintenance.update(rows, rows.length ? "Each framework's answer to the inverse offer of a draining machine." : "Every machine is UP: no inverse offers outstanding.");
  return `${agents.length} agents, ${(state.frameworks || []).length} frameworks`;
}

// ---- charts ---------------------------------------------------------------

const CHART_W = 340, CHART_H = 130;

// Chart wraps one uPlot plot in a figure whose data attributes say what it
// holds (data-metric, data-points, data-first, data-last: Unix seconds).
// Hovering shows the time and values in the legend.
class Chart {
  constructor(metric, label, series) {
    this.metric = metric;
    this.caption = el("figcaption", {}, el("span", { text: label }), el("span", { class: "latest" }));
    this.figure = el("figure", { class: "chart", dataset: { metric, points: "0" } }, this.caption);
    this.series = series;
    this.plot = null;
  }

  setData(times, columns) {
    const f = this.figure;
    f.dataset.points = String(times.length);
    f.dataset.first = times.length ? String(times[0]) : "";
    f.dataset.last = times.length ? String(times[times.length - 1]) : "";
    const latest = this.series[0].fmt(columns[0][columns[0].length - 1]);
    this.caption.lastChild.textContent = times.length ? latest : "–";
    const data = [times, ...columns];
    if (this.plot) {
      this.plot.setData(data);
      return;
    }
    if (!window.uPlot) return;
    const fmt0 = this.series[0].fmt;
    this.plot = new uPlot({
      width: CHART_W, height: CHART_H, class: "u-" + this.metric,
      cursor: { drag: { x: false, y: false }, points: { size: 5 } },
      scales: { y: { range: (u, min, max) => [0, Math.max(max * 1.1, this.series[0].min || 0)] } },
      axes: [{ size: 28, font: "10px system-ui" }, { size: 56, font: "10px system-ui", values: (u, vals) => vals.map((v) => (this.series[0].axis || fmt0)(v)) }],
      series: [{ label: "time", value: (u, v) => (v == null ? "–" : new Date(v * 1000).toLocaleTimeString()) },
        ...this.series.map((s) => ({ label: s.label, stroke: s.stroke, width: 1.5, value: (u, v) => s.fmt(v), points: { show: false } }))],
    }, data, f);
  }
}

// ---- node view ------------------------------------------------------------

let nodeView = null; // {agentID, series: Map task -> columns, cards, ...}

function newNodeView(view, agentID) {
  const nv = {
    agentID, series: new Map(), cards: new Map(), last: 0, historyError: "", historyStep: 0,
    title: el("h1"), meta: el("p", { class: "meta" }), memory: el("p", { id: "memory-bound", class: "meta" }),
    delays: new Table("delays", "Who delayed whom", ["Delayed task", "Culprit", "Culprit kind", "Waited", "Share of window"]),
    delayWindow: el("select", { id: "delay-window", "aria-label": "window" },
      [[60, "last minute"], [300, "last 5 minutes"], [900, "last 15 minutes"]].map(([v, t]) => el("option", { value: String(v), text: t }))),
    qos: el("section", { id: "qos" }), containers: el("div", { class: "cards" }), containersTitle: el("h2", { text: "Containers" }),
  };
  nv.delayWindow.value = "900";
  nv.delayWindow.addEventListener("change", refresh);
  nv.delays.section.querySelector(".table-head").append(nv.delayWindow);
  view.replaceChildren(nv.title, nv.meta, nv.memory, nv.delays.section, nv.qos,
    el("section", { id: "containers" }, nv.containersTitle, nv.containers));
  return nv;
}

// merge appends a GetHistory answer to the view's series, dropping points
// older than the window.
function merge(nv, resp) {
  for (const s of resp.series || []) {
    const key = s.taskId || s.containerId;
    let cur = nv.series.get(key);
    if (!cur) {
      cur = { times: [], cpus: [], mem: [], tx: [], rx: [], p99: [], delayed: [] };
      nv.series.set(key, cur);
    }
    cur.revocable = Boolean(s.revocable);
    cur.ended = Boolean(s.ended);
    cur.containerId = s.containerId;
    const times = s.times || [];
    for (let i = 0; i < times.length; i++) {
      const t = Number(times[i]);
      if (cur.times.length && t <= cur.times[cur.times.length - 1]) continue;
      cur.times.push(t);
      cur.cpus.push(Number(s.cpus?.[i] || 0));
      cur.mem.push(Number(s.memBytes?.[i] || 0));
      cur.tx.push(Number(s.netTxMbps?.[i] || 0));
      cur.rx.push(Number(s.netRxMbps?.[i] || 0));
      cur.p99.push(Number(s.runqueueP99Seconds?.[i] || 0));
      cur.delayed.push(Number(s.delayedByRevocable?.[i] || 0));
      nv.last = Math.max(nv.last, t);
    }
  }
  const from = nv.last - WINDOW_SECONDS;
  for (const cur of nv.series.values()) {
    let drop = 0;
    while (drop < cur.times.length && cur.times[drop] < from) drop++;
    if (drop) for (const k of ["times", "cpus", "mem", "tx", "rx", "p99", "delayed"]) cur[k].splice(0, drop);
  }
}

function card(key, revocable) {
  const charts = {
    cpu: new Chart("cpu", "CPU (cores)", [{ label: "cores", stroke: "#2f6fbd", fmt: (v) => fmt(v, 3), min: 0.05 }]),
    mem: new Chart("memory", "Memory", [{ label: "charged", stroke: "#3a9a5b", fmt: fmtBytes, min: 1 << 20 }]),
    net: new Chart("network", "Network (Mbit/s)", [{ label: "tx", stroke: "#c77d1a", fmt: (v) => fmt(v, 3), min: 0.01 }, { label: "rx", stroke: "#7a4cc2", fmt: (v) => fmt(v, 3) }]),
    p99: new Chart("runqueue-p99", "Run-queue latency p99", [{ label: "p99", stroke: "#7a4cc2", fmt: fmtSeconds, min: 1e-4 }]),
  };
  if (!revocable) charts.delayed = new Chart("delayed-by-revocable", "Delayed by revocable (s/s)", [{ label: "share", stroke: "#c77d1a", fmt: (v) => fmt(v, 4), min: 0.001 }]);
  const head = el("h3");
  const meta = el("p", { class: "meta" });
  const section = el("section", { class: "container" + (revocable ? " revocable" : ""), dataset: { taskId: key } }, head, meta,
    el("div", { class: "charts" }, Object.values(charts).map((c) => c.figure)));
  return { section, head, meta, charts, revocable };
}

// limitText is what a correction set: cores, memory.high or an I/O cap.
function limitText(c) {
  if (c.cpuLimit) return fmt(c.cpuLimit) + " cpus";
  if (c.memoryHighBytes && Number(c.memoryHighBytes) > 0) return fmtMiB(Number(c.memoryHighBytes) / (1 << 20)) + " high";
  if (c.ioLimitBytesPerSecond) return fmt(c.ioLimitBytesPerSecond / (1 << 20)) + " MiB/s";
  if (c.bandwidthLimitMbps) return fmt(c.bandwidthLimitMbps) + " Mbit/s";
  return "";
}

const TW = 720;

// timeline draws QoS corrections in the TIMELINE_SECONDS ending at now.
function timeline(corrections, now) {
  const x = (t) => 2 + ((TW - 4) * (t - (now - TIMELINE_SECONDS))) / TIMELINE_SECONDS;
  const marks = corrections.filter((c) => ts(c.timestamp) >= now - TIMELINE_SECONDS).map((c) => {
    const t = ts(c.timestamp);
    const kind = short(c.kind, "CORRECTION_KIND_").toLowerCase();
    return el("g", { class: "correction " + kind, dataset: { kind: c.kind, t: String(t) } },
      el("line", { x1: x(t), x2: x(t), y1: 8, y2: 52 }),
      el("circle", { cx: x(t), cy: kind === "kill" ? 44 : kind === "unthrottle" || kind === "thaw" || kind === "release" ? 30 : 16, r: 5 }),
      el("title", { text: `${new Date(t * 1000).toLocaleTimeString()} ${short(c.kind, "CORRECTION_KIND_")} ${c.taskId || "revocable subtree"}${c.cpuLimit ? " to " + fmt(c.cpuLimit) + " cpus" : ""}: ${c.reason || ""}` }));
  });
  return el("svg", { id: "qos-timeline", viewBox: `0 0 ${TW} 60`, preserveAspectRatio: "none", dataset: { corrections: marks.length } },
    el("line", { x1: 0, x2: TW, y1: 52, y2: 52, class: "axis" }),
    el("text", { x: 4, y: 59, class: "tick", text: `−${TIMELINE_SECONDS}s` }),
    el("text", { x: TW - 28, y: 59, class: "tick", text: "now" }),
    marks);
}

// showMemoryBound says which bound set the revocable mem estimate (GetUsage's
// memory, #28), with what the node keeps free for the QoS controllers and
// holds beyond the containers' working sets; data-limited-by names the bound.
function showMemoryBound(p, m) {
  if (!m) {
    delete p.dataset.limitedBy;
    p.textContent = "No revocable memory estimated.";
    return;
  }
  const mib = (b) => Number(b || 0) / (1 << 20);
  const need = Number(m.needMib || 0);
  const bounds = [
    ["ESTIMATE_MEMORY_BOUND_ALLOCATIONS", "the guaranteed allocations", m.allocationsBoundMib, `${fmtMiB(Number(m.allocatedMib || 0))} allocated − ${fmtMiB(need)} need`],
    ["ESTIMATE_MEMORY_BOUND_TOTAL", "the agent's mem", m.totalBoundMib, `${fmtMiB(Number(m.totalBoundMib || 0) + need)} − ${fmtMiB(need)} need`],
    ["ESTIMATE_MEMORY_BOUND_NODE", "the node", m.nodeBoundMib,
      `${fmtMiB(mib(m.nodeTotalBytes))} − ${fmtMiB(mib(m.keepFreeBytes))} kept free for QoS − ${fmtMiB(mib(m.otherBytes))} other use − ${fmtMiB(need)} need`],
  ];
  const limiting = bounds.find(([name]) => name === m.limitedBy);
  const others = bounds.filter(([name, , bound]) => name !== m.limitedBy && bound !== undefined)
    .map(([, what, bound, terms]) => `${what} ${fmtMiB(Number(bound || 0))}` + (what === "the node" ? ` (${terms})` : ""));
  p.dataset.limitedBy = short(m.limitedBy, "ESTIMATE_MEMORY_BOUND_").toLowerCase();
  p.textContent = `revocable mem ${fmtMiB(Number(m.estimateMib || 0))}` + (limiting ? `, limited by ${limiting[1]}: ${limiting[3]}` : "") +
    (others.length ? ` · other bounds: ${others.join(", ")}` : "");
}

async function renderNode(view, agentID, fresh) {
  if (fresh || !nodeView || nodeView.agentID !== agentID) nodeView = newNodeView(view, agentID);
  const nv = nodeView;
  const historyReq = nv.last ? { since: new Date(Math.round(nv.last * 1000)).toISOString(), stepSeconds: HISTORY_STEP_SECONDS } : { stepSeconds: HISTORY_STEP_SECONDS };
  const soft = (p) => p.catch((err) => ({ error: explain(err) }));
  const [agents, containers, usage, corrections, estimate, hist, delays] = await Promise.all([
    operator("GetAgents"), node(agentID, "GetContainers"), node(agentID, "GetUsage"),
    node(agentID, "GetCorrections"), node(agentID, "GetEstimate").catch(() => ({})),
    soft(node(agentID, "GetHistory", historyReq)), soft(node(agentID, "GetDelays", { windowSeconds: Number(nv.delayWindow.value) })),
  ]);
  if (nodeView !== nv) return "";
  const agent = (agents.agents || []).find((a) => a.id === agentID) || { id: agentID };
  if (hist.error) nv.historyError = hist.error; else { nv.historyError = ""; nv.historyStep = Number(hist.stepSeconds || 0); merge(nv, hist); }
  const stats = Object.fromEntries((usage.usage || []).map((u) => [u.taskId, u.statistics || {}]));
  let now = ts(usage.node?.timestamp) || Date.now() / 1000;
  for (const st of Object.values(stats)) now = Math.max(now, ts(st.timestamp) || 0);

  // Containers: the live ones, then those that ended within the window.
  const live = new Map((containers.containers || []).map((c) => [c.taskId, c]));
  const keys = [...new Set([...live.keys(), ...nv.series.keys()])];
  const revocableOf = (k) => (live.has(k) ? Boolean(live.get(k).revocable) : Boolean(nv.series.get(k)?.revocable));
  keys.sort((a, b) => Number(!live.has(a)) - Number(!live.has(b)) || Number(revocableOf(a)) - Number(revocableOf(b)) || collator.compare(a, b));
  for (const k of keys) if (!nv.cards.has(k)) nv.cards.set(k, card(k, revocableOf(k)));
  for (const k of [...nv.cards.keys()]) if (!keys.includes(k)) nv.cards.delete(k);
  nv.containers.replaceChildren(...keys.map((k) => nv.cards.get(k).section));
  for (const k of keys) {
    const cd = nv.cards.get(k), c = live.get(k), s = nv.series.get(k), st = stats[k] || {};
    const stateName = c ? short(c.state, "TASK_STATE_") || "UNKNOWN" : "ENDED";
    Object.assign(cd.section.dataset, { containerId: c?.containerId || s?.containerId || "", state: c ? c.state || "" : "ENDED", revocable: String(cd.revocable) });
    cd.head.replaceChildren(el("span", { class: "id", text: k }), " ",
      el("span", { class: "badge", text: cd.revocable ? "revocable" : "guaranteed" }), " ",
      el("span", { class: "state " + stateName.toLowerCase(), text: stateName }), " ",
      c ? el("a", { class: "logs", href: logsHref({ agentId: agentID, frameworkId: c.frameworkId, taskId: k }), text: "stdout/stderr" }) : null);
    cd.meta.textContent = c ? `framework ${c.frameworkId} · cgroup ${c.cgroupPath} · pid ${c.pid || "–"} · RSS ${fmtBytes(Number(st.memRssBytes || 0))} · working set ${fmtBytes(Number(st.memWorkingSetBytes || 0))} · mem PSI ${fmt(st.memoryPressure?.someAvg10 || 0)}% · io PSI ${fmt(st.ioPressure?.someAvg10 || 0)}%`
      : "ended: kept until its last point is older than the agent's history window";
    const h = s || { times: [], cpus: [], mem: [], tx: [], rx: [], p99: [], delayed: [] };
    cd.charts.cpu.setData(h.times, [h.cpus]);
    cd.charts.mem.setData(h.times, [h.mem]);
    cd.charts.net.setData(h.times, [h.tx, h.rx]);
    cd.charts.p99.setData(h.times, [h.p99]);
    if (cd.charts.delayed) cd.charts.delayed.setData(h.times, [h.delayed]);
  }
  nv.containersTitle.textContent = `Containers (${live.size} live${keys.length > live.size ? `, ${keys.length - live.size} ended` : ""})` +
    (nv.historyError ? ` · no history: ${nv.historyError}` : "") +
    // The agent averages over a coarser step when 1 s steps would not fit in one answer.
    (nv.historyStep > HISTORY_STEP_SECONDS ? ` · history averaged over ${fmt(nv.historyStep)} s steps (too many containers for ${HISTORY_STEP_SECONDS} s)` : "");

  // Who delayed whom.
  if (delays.error) {
    nv.delays.update([], `No who-delayed-whom: ${delays.error}`);
  } else {
    const span = Math.max(1, (ts(delays.until) || now) - (ts(delays.since) || now));
    nv.delays.update((delays.delays || []).map((d) => {
      const culprit = d.culpritTaskId || d.culprit;
      const kind = d.culpritTaskId ? (d.culpritRevocable ? "revocable task" : "guaranteed task") : d.culprit;
      const share = Number(d.secs || 0) / span;
      return {
        dataset: { victim: d.victimTaskId || d.victimContainerId, culprit, culpritKind: d.culpritTaskId ? (d.culpritRevocable ? "revocable" : "guaranteed") : d.culprit },
        cells: [cell(d.victimTaskId || d.victimContainerId), cell(culprit), cell(kind), num(fmtSeconds(Number(d.secs || 0)), Number(d.secs || 0)),
          { text: fmt(100 * share, 1) + "%", sort: share, class: "num", node: el("span", { class: "share" }, fmt(100 * share, 1) + "%", bar(share, 1)) }],
      };
    }), delays.since ? `Time each task waited for a CPU while the culprit held it, ${new Date(ts(delays.since) * 1000).toLocaleTimeString()} to ${new Date(ts(delays.until) * 1000).toLocaleTimeString()} (eBPF; without --ebpf-all-culprits only revocable tasks are culprits).` : "Nothing measured yet (eBPF).");
  }

  // QoS corrections.
  const corr = corrections.corrections || [];
  const recent = corr.slice(-20).reverse().map((c) =>
    el("tr", { dataset: { kind: c.kind } },
      el("td", { text: c.timestamp ? new Date(c.timestamp).toLocaleTimeString() : "" }),
      el("td", { class: "kind " + short(c.kind, "CORRECTION_KIND_").toLowerCase(), text: short(c.kind, "CORRECTION_KIND_") }),
      el("td", { text: c.controller || "" }), el("td", { text: c.taskId || "revocable subtree" }),
      el("td", { class: "num", text: limitText(c) }),
      el("td", { class: "num", text: fmtSeconds(c.reactionSeconds) }), el("td", { text: c.reason || "" })));
  nv.qos.replaceChildren(el("h2", { text: "QoS corrections" }), timeline(corr, now),
    recent.length ? el("table", {}, el("thead", {}, el("tr", {}, ["Time", "Kind", "Controller", "Target", "Limit", "Reaction", "Reason"].map((h) => el("th", { text: h })))), el("tbody", {}, recent))
      : el("p", { class: "note", text: "No corrections yet." }));

  const total = scalars(agent.resources), est = scalars(estimate.revocable);
  const ns = usage.node || {};
  nv.title.replaceChildren(el("span", { class: "hostname", text: agent.hostname || agentID }), " ",
    el("span", { class: "state", text: short(agent.state, "AGENT_STATE_") }), " ",
    el("span", { class: "mode", text: short(agent.mode, "MACHINE_MODE_") }));
  showMemoryBound(nv.memory, usage.memory);
  nv.meta.textContent = `agent ${agentID} · ${fmt(total.cpus || 0)} cpus, ${fmtMiB(total.mem || 0)} · node CPU used ${fmt(ns.cpusRate)} · load ${fmt(ns.loadAvg1)} · revocable estimate ${fmt(est.cpus || 0)} cpus, ${fmtMiB(est.mem || 0)} (${estimate.estimator || "?"}) · node mem PSI ${fmt(ns.memoryPressure?.someAvg10 || 0)}%, io PSI ${fmt(ns.ioPressure?.someAvg10 || 0)}%`;
  return `${agent.hostname || agentID}: ${live.size} containers`;
}

// ---- task output ----------------------------------------------------------

async function renderLogs(view, r, fresh) {
  const read = (path) => node(r.agent, "ReadSandboxFile", { frameworkId: r.framework, taskId: r.task, path, offset: String(-LOG_BYTES) })
    .then((f) => ({ text: f.data ? new TextDecoder().decode(Uint8Array.from(atob(f.data), (ch) => ch.charCodeAt(0))) : "", size: Number(f.size || 0) }))
    .catch((err) => ({ error: explain(err) }));
  const [out, errOut] = await Promise.all([read("stdout"), read("stderr")]);
  const pane = (name, f) => el("section", { class: "log", id: name }, el("h2", { text: name + (f.size > LOG_BYTES ? ` (last ${LOG_BYTES >> 10} KiB of ${fmtBytes(f.size)})` : "") }),
    f.error ? el("p", { class: "note error", text: f.error }) : el("pre", { text: f.text || "(empty)" }));
  const scrolled = fresh ? [] : [...view.querySelectorAll("pre")].map((p) => p.scrollTop);
  view.replaceChildren(el("h1", {}, "Output of ", el("span", { class: "id", text: r.task })),
    el("p", { class: "meta" }, `framework ${r.framework} · `, el("a", { href: `#/agents/${encodeURIComponent(r.agent)}`, text: "its node" })),
    pane("stdout", out), pane("stderr", errOut));
  view.querySelectorAll("pre").forEach((p, i) => { p.scrollTop = scrolled[i] ?? p.scrollHeight; });
  return `output of ${r.task}`;
}

// ---- loop -----------------------------------------------------------------

function route() {
  let m = location.hash.match(/^#\/agents\/(.+)$/);
  if (m) return { view: "node", agent: decodeURIComponent(m[1]) };
  m = location.hash.match(/^#\/logs\/([^/]*)\/([^/]*)\/([^/]+)$/);
  if (m) return { view: "logs", agent: decodeURIComponent(m[1]), framework: decodeURIComponent(m[2]), task: decodeURIComponent(m[3]) };
  return { view: "cluster" };
}

let timer = null;
let generation = 0;
let lastRoute = "";

async function refresh() {
  const gen = ++generation;
  clearTimeout(timer);
  const r = route();
  const fresh = location.hash !== lastRoute;
  lastRoute = location.hash;
  if (fresh && r.view !== "node") nodeView = null;
  if (fresh && r.view !== "cluster") cluster = null;
  const crumbs = document.getElementById("crumbs");
  crumbs.replaceChildren(el("a", { href: "#/", text: "Cluster" }), ...(r.view === "node" ? [el("span", { text: " › node" })] : r.view === "logs" ? [el("span", { text: " › task output" })] : []));
  const view = document.getElementById("view");
  try {
    const summary = r.view === "node" ? await renderNode(view, r.agent, fresh) : r.view === "logs" ? await renderLogs(view, r, fresh) : await renderCluster(view, fresh);
    if (gen !== generation) return;
    setStatus(`${summary} · updated ${new Date().toLocaleTimeString()}`, false);
  } catch (err) {
    if (gen !== generation) return;
    setStatus(explain(err), true);
  }
  timer = setTimeout(refresh, r.view === "node" ? NODE_PERIOD_MS : r.view === "logs" ? LOGS_PERIOD_MS : CLUSTER_PERIOD_MS);
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
    lastRoute = "";
    refresh();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    input.value = "";
    show();
    lastRoute = "";
    refresh();
  });
  show();
}

window.addEventListener("hashchange", refresh);
document.addEventListener("DOMContentLoaded", () => {
  setupToken();
  refresh();
});
