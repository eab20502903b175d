// The runners page. Reads the public API with the API key kept in this tab's session storage;
// every value from the server reaches the page through textContent, never as markup.
"use strict";

const KEY = "leasehold.key";
const REFRESH_MS = 2000;
const RECENT = 25;

const $ = (id) => document.getElementById(id);
let timer = null;
let selected = null; // id of the job whose events are shown
const labels = new Map(); // runner id -> label, from the last roster

function key() {
  return sessionStorage.getItem(KEY);
}

class Unauthorized extends Error {}

async function api(path) {
  const res = await fetch(path, {
    headers: { Authorization: "Bearer " + key(), Accept: "application/json" },
    cache: "no-store",
  });
  if (res.status === 401) throw new Unauthorized();
  const body = await res.json().catch(() => null);
  if (!res.ok) {
    const msg = body && body.error ? body.error.code + ": " + body.error.message : res.statusText;
    throw new Error(msg);
  }
  return body;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function badge(text, kind) {
  return el("span", text, "badge " + kind);
}

function ago(iso) {
  if (!iso) return "never";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

function showSignIn(message) {
  stop();
  $("board").hidden = true;
  $("sign-out").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  $("sign-in-error").textContent = message || "";
  $("key").focus();
}

function showBoard() {
  $("sign-in").hidden = true;
  $("board").hidden = false;
  $("sign-out").hidden = false;
  refresh();
  timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
}

function stop() {
  if (timer) clearInterval(timer);
  timer = null;
}

function renderPool(p) {
  $("pool-online").textContent = p.runners.online;
  $("pool-dormant").textContent = p.runners.dormant;
  $("pool-never").textContent = p.runners.never;
  $("pool-slots").textContent = p.slots.active + " / " + p.slots.capacity;
  $("pool-parked").textContent = p.jobs.parked;
  $("pool-leased").textContent = p.jobs.leased;
}

function renderRunners(runners) {
  labels.clear();
  for (const r of runners) labels.set(r.id, r.label);
  const body = $("runners").tBodies[0];
  const rows = runners.map((r) => {
    const tr = el("tr");
    tr.dataset.runner = r.id;
    tr.dataset.presence = r.presence;
    const name = el("th");
    name.scope = "row";
    name.append(el("span", r.label, "label"), el("span", r.os || "", "sub"));
    tr.append(name);
    const presence = el("td");
    presence.append(badge(r.presence, "presence-" + r.presence));
    presence.append(el("span", "seen " + ago(r.last_seen_at), "sub"));
    tr.append(presence);
    const version = el("td", r.version || "unknown");
    if (r.outdated === true) version.append(" ", badge("outdated", "warn"));
    tr.append(version);
    const slots = el("td");
    slots.append(el("span", r.active_leases + " / " + r.capacity, "slots"));
    const meter = el("meter");
    meter.min = 0;
    meter.max = r.capacity;
    meter.value = r.active_leases;
    meter.setAttribute("aria-label", r.active_leases + " of " + r.capacity + " slots in use");
    slots.append(meter);
    tr.append(slots);
    const caps = el("td");
    const exclusive = new Set(r.exclusive || []);
    for (const c of r.capabilities) caps.append(el("span", c, exclusive.has(c) ? "cap exclusive" : "cap"));
    if (r.capabilities.length === 0) caps.append(el("span", "none", "sub"));
    tr.append(caps);
    const owner = el("td", r.owner.startsWith("ws:") ? "workspace" : r.owner);
    if (r.ephemeral) owner.append(" ", badge("ephemeral", "info"));
    tr.append(owner);
    return tr;
  });
  body.replaceChildren(...rows);
  $("runners-empty").hidden = runners.length > 0;
}

function target(j) {
  if (j.runner_id && j.runner_id !== "*") return "runner " + j.runner_id.slice(0, 8);
  if (j.pool) return j.pool + " pool";
  return j.owner.startsWith("ws:") ? "workspace pool" : "personal pool";
}

function renderJobs(jobs) {
  const body = $("jobs").tBodies[0];
  const rows = jobs.map((j) => {
    const tr = el("tr");
    tr.dataset.job = j.id;
    tr.dataset.state = j.state;
    const cell = el("th");
    cell.scope = "row";
    const open = el("button", j.id.slice(0, 8) + "…" + j.id.slice(-4), "link");
    open.type = "button";
    open.setAttribute("aria-label", "Show job " + j.id);
    open.addEventListener("click", () => select(j.id));
    cell.append(open);
    tr.append(cell);
    const state = el("td");
    state.append(badge(j.state, "state-" + j.state));
    if (j.error && j.error.reason) state.append(el("span", j.error.reason, "sub"));
    tr.append(state);
    tr.append(el("td", j.kind), el("td", target(j)));
    tr.append(el("td", j.attempts + " / " + j.max_attempts));
    tr.append(el("td", ago(j.created_at)));
    if (j.id === selected) tr.classList.add("selected");
    return tr;
  });
  body.replaceChildren(...rows);
  $("jobs-empty").hidden = jobs.length > 0;
}

// The newest jobs. `order=desc` is the contract's (v1.1); a server without it answers in
// ascending order, and then the page walks forward to the last page instead.
async function recentJobs() {
  const first = await api("/v1/jobs?order=desc&limit=" + RECENT);
  const jobs = first.jobs;
  const ascending = jobs.length > 1 && jobs[0].id < jobs[jobs.length - 1].id;
  if (!ascending) return jobs;
  let all = jobs;
  let next = first.next;
  for (let i = 0; next && i < 10; i++) {
    const page = await api("/v1/jobs?limit=500&after=" + encodeURIComponent(next));
    all = all.concat(page.jobs);
    next = page.next;
  }
  return all.slice(-RECENT).reverse();
}

async function renderJob(id) {
  const [job, events, artifacts] = await Promise.all([
    api("/v1/jobs/" + id),
    api("/v1/jobs/" + id + "/events"),
    api("/v1/jobs/" + id + "/artifacts"),
  ]);
  if (selected !== id) return;
  const facts = $("job-facts");
  const pairs = [
    ["Id", job.id],
    ["State", job.state],
    ["Kind", job.kind],
    ["Target", target(job)],
    ["Epoch", job.epoch],
    ["Attempts", job.attempts + " / " + job.max_attempts],
    ["Created", job.created_at],
    ["Finished", job.finished_at || "–"],
  ];
  if (job.error) pairs.push(["Error", job.error.reason + (job.error.message ? ": " + job.error.message : "")]);
  if (job.provenance && job.provenance.runner) {
    const id = job.provenance.runner;
    pairs.push(["Ran on", labels.has(id) ? labels.get(id) + " (" + id.slice(0, 8) + ")" : id]);
  }
  facts.replaceChildren(
    ...pairs.flatMap(([k, v]) => {
      const d = el("div");
      d.append(el("dt", k), el("dd", v));
      return [d];
    }),
  );
  facts.dataset.state = job.state;
  const list = events.events.map((e) => {
    const li = el("li");
    li.append(el("span", "#" + e.seq, "seq"), el("span", e.kind, "kind"));
    let text;
    if (e.kind === "state" && e.data) {
      text = [e.data.state, e.data.reason, e.data.epoch !== null && e.data.epoch !== undefined ? "epoch " + e.data.epoch : null]
        .filter(Boolean)
        .join(" · ");
    } else {
      text = JSON.stringify(e.data);
    }
    li.append(el("span", text, "data"), el("time", ago(e.at), "sub"));
    return li;
  });
  $("events").replaceChildren(...list);
  renderArtifacts(id, artifacts);
}

// A job's artifacts (newest attempt first), each a download link to its attempt's file. The
// API needs the key in a header, so a click fetches the bytes and hands them to the browser as
// a file.
function renderArtifacts(id, page) {
  const items = page.artifacts.map((a) => {
    const li = el("li");
    const link = el("a", a.path);
    link.href = "/v1/jobs/" + id + "/artifacts/" + a.path + "?epoch=" + a.epoch;
    link.dataset.path = a.path;
    link.dataset.epoch = a.epoch;
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      download(link.href, a.path.split("/").pop()).catch(fail);
    });
    li.append(
      link,
      el("span", "epoch " + a.epoch, "sub"),
      el("span", size(a.size), "sub"),
      el("code", a.sha256.slice(0, 12), "sub"),
    );
    return li;
  });
  if (items.length === 0) items.push(el("li", "none", "sub"));
  // The first page (100); the rest with `leasehold job artifacts ID`.
  if (page.next) items.push(el("li", "… more: leasehold job artifacts " + id, "sub"));
  $("artifacts").replaceChildren(...items);
}

function size(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

async function download(href, name) {
  const res = await fetch(href, { headers: { Authorization: "Bearer " + key() }, cache: "no-store" });
  if (res.status === 401) throw new Unauthorized();
  if (!res.ok) throw new Error("download: " + res.status);
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

async function select(id) {
  selected = id;
  $("job").hidden = false;
  $("job-title").textContent = "Job " + id;
  for (const tr of $("jobs").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.job === id);
  await renderJob(id).catch(fail);
  $("job-title").focus();
}

function fail(e) {
  if (e instanceof Unauthorized) {
    sessionStorage.removeItem(KEY);
    showSignIn("That key was refused. Sign in again.");
    return;
  }
  $("status").textContent = "Could not refresh: " + e.message;
}

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const [pool, roster, jobs] = await Promise.all([
      api("/v1/pool"),
      api("/v1/workspace/runners"),
      recentJobs(),
    ]);
    renderPool(pool);
    renderRunners(roster.runners);
    renderJobs(jobs);
    if (selected) await renderJob(selected);
    const ws = roster.runners.length ? roster.runners[0].workspace : (jobs.length ? jobs[0].workspace : null);
    if (ws) {
      $("who").textContent = "workspace " + ws;
      $("who").hidden = false;
    }
    $("status").textContent = "Updated " + new Date().toLocaleTimeString();
    document.body.dataset.ready = "true";
  } catch (e) {
    fail(e);
  } finally {
    busy = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = $("key").value.trim();
    if (!value) return;
    sessionStorage.setItem(KEY, value);
    $("key").value = "";
    showBoard();
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    selected = null;
    $("job").hidden = true;
    showSignIn("Signed out.");
  });
  $("job-close").addEventListener("click", () => {
    selected = null;
    $("job").hidden = true;
    $("jobs").focus();
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && selected) $("job-close").click();
  });
  if (key()) showBoard();
  else showSignIn();
});
