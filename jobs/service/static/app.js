// Slackline jobs page. Everything shown is fetched by this script from the
// job service's Connect JSON API (the calls slacklinectl jobs makes); the
// server never renders data into the page. DOM is built with textContent
// only. The caller's token stays in sessionStorage (this tab only).
"use strict";

const TOKEN_KEY = "slackline.token";
const PERIOD_MS = 2000;

async function rpc(method, body) {
  const headers = { "Content-Type": "application/json", "Connect-Protocol-Version": "1" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(`/slackline.v1.JobService/${method}`, { method: "POST", headers, body: JSON.stringify(body || {}), cache: "no-store" });
  const text = await resp.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch (e) { throw new Error(`HTTP ${resp.status}: ${text.slice(0, 200)}`); }
  if (!resp.ok) throw new Error(`${data.code || resp.status}: ${data.message || ""}`);
  return data;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "text") e.textContent = v;
    else if (k === "width") e.style.width = v;
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
  return e;
}

const short = (v, prefix) => (v || "").replace(prefix, "");
const n = (v) => Number(v || 0);

function bar(s) {
  const total = n(s.completions) || 1;
  const pct = (v) => `${(100 * n(v)) / total}%`;
  return el("div", { class: "bar", title: `${n(s.succeeded)} succeeded, ${n(s.running)} running, ${n(s.failed)} failed of ${n(s.completions)}` },
    el("span", { class: "succeeded", width: pct(s.succeeded) }), el("span", { class: "running", width: pct(s.running) }),
    el("span", { class: "failed", width: pct(s.failed) }));
}

function jobsTable(jobs) {
  const head = ["Name", "Owner", "Role", "State", "Progress", "Succeeded", "Running", "Pending", "Failed", "Preempted", "Failures", "Submitted"];
  return el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))),
    el("tbody", {}, jobs.map((j) => {
      const state = short(j.state, "JOB_STATE_");
      return el("tr", {},
        el("td", {}, el("a", { href: `#/job/${encodeURIComponent(j.name)}`, text: j.name })),
        el("td", { text: j.owner || "–" }), el("td", { text: j.role }), el("td", { class: `state-${state}`, text: state }),
        el("td", {}, j.schedule ? el("span", { text: j.schedule }) : bar(j)),
        el("td", { text: `${n(j.succeeded)}/${n(j.completions)}` }), el("td", { text: n(j.running) }), el("td", { text: n(j.pending) }),
        el("td", { text: n(j.failed) }), el("td", { text: n(j.preempted) }), el("td", { text: n(j.failures) }),
        el("td", { text: j.submitted || "" }));
    })));
}

function jobView(d) {
  const s = d.summary || {};
  const state = short(s.state, "JOB_STATE_");
  const facts = [["State", state], ["Message", s.message], ["Owner", s.owner], ["Role", s.role], ["Priority", n(s.priority)],
    ["Revocable", s.revocable], ["Schedule", s.schedule], ["Next run", s.nextRun], ["Cron job", s.parent],
    ["Indexes", s.schedule ? undefined : `${n(s.succeeded)} succeeded, ${n(s.running)} running, ${n(s.pending)} pending, ${n(s.failed)} failed of ${n(s.completions)}`],
    ["Retries", `${n(s.failures)} failures, ${n(s.preempted)} preempted, ${n(s.lost)} lost`],
    ["Submitted", s.submitted], ["Finished", s.finished]];
  const byState = {};
  for (const ix of d.indexes || []) {
    const st = short(ix.state, "JOB_INDEX_STATE_");
    (byState[st] = byState[st] || []).push(ix);
  }
  const interesting = (d.indexes || []).filter((ix) => n(ix.failures) + n(ix.preemptions) + n(ix.losses) > 0 || short(ix.state, "JOB_INDEX_STATE_") === "LAUNCHED").slice(0, 200);
  return el("div", {},
    el("h2", { text: s.name }),
    el("dl", {}, facts.filter(([, v]) => v !== undefined && v !== "").map(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })])),
    el("h3", { text: "Indexes by state" }),
    el("p", { text: Object.entries(byState).map(([k, v]) => `${k}: ${v.length}`).join(", ") || "–" }),
    interesting.length ? el("table", {}, el("thead", {}, el("tr", {}, ["Index", "State", "Task", "Task state", "Failures", "Preempted", "Lost", "Reason"].map((h) => el("th", { text: h })))),
      el("tbody", {}, interesting.map((ix) => el("tr", {}, el("td", { text: n(ix.index) }), el("td", { text: short(ix.state, "JOB_INDEX_STATE_") }),
        el("td", { text: ix.taskId || "" }), el("td", { text: short(ix.taskState, "TASK_STATE_") }), el("td", { text: n(ix.failures) }),
        el("td", { text: n(ix.preemptions) }), el("td", { text: n(ix.losses) }),
        el("td", { text: [short(ix.reason, "REASON_"), ix.message].filter(Boolean).join(": ") }))))) : null,
    d.runs && d.runs.length ? el("p", {}, "Runs: ", d.runs.map((r) => [el("a", { href: `#/job/${encodeURIComponent(r)}`, text: r }), " "])) : null,
    el("h3", { text: "Events" }),
    el("table", {}, el("tbody", {}, (d.events || []).map((e) => el("tr", {}, el("td", { text: e.time || "" }), el("td", { text: e.message }))))));
}

async function refresh() {
  const status = document.getElementById("status");
  const view = document.getElementById("view");
  const m = location.hash.match(/^#\/job\/(.+)$/);
  try {
    if (m) {
      const resp = await rpc("GetJob", { name: decodeURIComponent(m[1]) });
      view.replaceChildren(jobView(resp.job || {}));
    } else {
      const resp = await rpc("GetJobs", {});
      view.replaceChildren(jobsTable(resp.jobs || []));
    }
    status.className = "";
    status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    status.className = "error";
    status.textContent = String(e.message || e);
  }
}

document.getElementById("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token");
  if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  refresh();
});
document.getElementById("token-clear").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); refresh(); });
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, PERIOD_MS);
