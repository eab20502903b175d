// The leasehold page. Reads the public API with the API key kept in this tab's session storage;
// every value from the server reaches the page through textContent, never as markup.
//
// What it shows is held to Buildkite's job page and River's UI: a job's status is its outcome
// (a failed command is red, with its exit code), its log reads as text per attempt, its
// attempts and retries are a timeline, and a member may retry or cancel it. Attempts are
// numbered as the command line numbers them (crates/runner/src/cli/jobs/render.rs, `Attempts`):
// attempt N is the job's N-th try (its retries + 1), and a try's leases are counted within it.
"use strict";

const KEY = "leasehold.key";
const REFRESH_MS = 2000;
const RECENT = 25;
const EVENT_PAGES = 20; // at most 20 pages of 1000 events are read for one job

const $ = (id) => document.getElementById(id);
let timer = null;
let selected = null; // id of the job shown
let lastRoster = null; // the last runners the server listed
let lastGood = null; // when the server last answered
const labels = new Map(); // runner id -> label, from the last roster

function key() {
  return sessionStorage.getItem(KEY);
}

class Unauthorized extends Error {}

async function api(path, method) {
  const init = {
    method: method || "GET",
    headers: { Authorization: "Bearer " + key(), Accept: "application/json" },
    cache: "no-store",
  };
  if (method === "POST") {
    init.headers["Content-Type"] = "application/json";
    init.body = "{}";
  }
  const res = await fetch(path, init);
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

function clock(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : "–";
}

function duration(from, to) {
  if (!from || !to) return null;
  const ms = Math.max(0, Date.parse(to) - Date.parse(from));
  if (ms < 1000) return ms + " ms";
  const s = Math.round(ms / 1000);
  if (s < 120) return s + " s";
  return Math.floor(s / 60) + " min " + (s % 60) + " s";
}

// The last 8 hex digits of an id: its random part (UUIDv7s made in one millisecond share their
// first 12).
const short = (id) => (id ? String(id).slice(-8) : "?");

// A runner as people name it: its label and a short id (labels repeat: every dev runner is
// named after its host).
function runnerName(id) {
  if (!id) return "?";
  return labels.has(id) ? labels.get(id) + " · " + short(id) : short(id);
}

// ---- what a job is --------------------------------------------------------------------------

const SIGNALS = { 1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM" };

function exitText(j) {
  const r = j.result;
  if (!r || typeof r !== "object") return null;
  if (Number.isInteger(r.exit_code)) return "exit " + r.exit_code;
  if (r.timed_out === true) return "timed out";
  if (Number.isInteger(r.signal)) return "killed by " + (SIGNALS[r.signal] || "signal " + r.signal);
  return null;
}

// The badge a job wears: its outcome once settled (red for failed, with the exit code), else
// where it is.
function status(j) {
  if (j.outcome) {
    const why = j.outcome === "failed" ? exitText(j) || (j.error && j.error.reason) : j.outcome === "rejected" && j.error ? j.error.reason : null;
    return { text: why ? j.outcome + " · " + why : j.outcome, cls: "outcome-" + j.outcome };
  }
  if (j.state === "parked" && j.not_before) return { text: "waiting to retry", cls: "state-parked" };
  return { text: j.state === "leased" ? "running" : j.state, cls: "state-" + j.state };
}

function shellWord(w) {
  return /^[A-Za-z0-9\/._+:@%,=-]+$/.test(w) ? w : "'" + w.replace(/'/g, "'\\''") + "'";
}

// Control characters but the newline, and bidirectional formatting characters, written as Rust
// writes them (`\u{202e}`, `\t`): what the command line's `escaped` does
// (crates/runner/src/wire/input.rs), so `e\u{202e}gnp.exe` cannot read as another name.
function escaped(text) {
  return text.replace(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) =>
    c === "\t" ? "\\t" : c === "\r" ? "\\r" : "\\u{" + c.codePointAt(0).toString(16) + "}");
}

function commandText(j) {
  if (j.kind === "command" && j.payload && Array.isArray(j.payload.argv)) {
    return escaped(j.payload.argv.map((a) => shellWord(String(a))).join(" "));
  }
  return "(" + j.kind + ")";
}

// Why a parked job waits (v1.4 `waiting`), in words.
function waitingText(j) {
  const words = {
    no_matching_runner: "no runner of its target can take it (none enrolled there advertises what it requires)",
    no_runner_online: "runners of its target could take it, but none is online",
    all_busy: "every slot of the online runners of its target is busy",
    not_before: "a retry's delay has not passed yet",
  };
  return (words[j.waiting] || j.waiting) + " (" + j.waiting + ")";
}

function target(j) {
  if (j.runner_id && j.runner_id !== "*") return "runner " + runnerName(j.runner_id);
  if (j.pool) return j.pool + " pool";
  return j.owner.startsWith("ws:") ? "workspace pool" : "personal pool";
}

// Attempt N of M: M is 1 + the retry policy's limit; a job without a policy has attempts
// only when it is retried by hand.
function attemptText(j) {
  const n = j.retries + 1;
  const of = j.retry && n <= j.retry.limit + 1 ? " of " + (j.retry.limit + 1) : "";
  return n + of;
}

// A reason code of the contract (a state event's reason or `after`), in words a person reads.
const REASONS = {
  runner_failed: "the runner could not run it",
  exit_code: "the command exited non-zero",
  lease_lost: "its runner went silent (lease lost)",
  cancelled: "cancelled",
  capability_mismatch: "the runner lacks what it requires",
  no_runner: "no runner could take it in time",
  queue_timeout: "it waited too long in the queue",
  runner_revoked: "its runner was revoked",
  secret_missing: "a secret it needs is missing",
  retry_call: "retried by hand",
  retry: "retried",
  caller_gone: "the runner's lease call was gone",
  released: "the runner gave it back",
  lapsed: "its lease lapsed",
};
function reasonText(code) {
  return REASONS[code] || (code ? String(code).replace(/_/g, " ") : "");
}

// Which attempt and lease each event belongs to (the command line's `Attempts`).
class Attempts {
  constructor() {
    this.attempt = 1;
    this.lease = 0;
    this.ended = null;
  }
  // A state event's data; returns the lease that starts, if one does.
  onState(d) {
    if (d.state === "parked" && d.reason === "retry") {
      const ended = Number.isInteger(d.attempt) ? d.attempt : this.attempt;
      this.attempt = ended + 1;
      this.lease = 0;
      this.ended = "attempt " + ended + " ended: " + reasonText(d.after || "retry");
      return null;
    }
    if (d.state === "parked") {
      if (d.reason && d.reason !== "dispatched") this.ended = reasonText(d.reason);
      return null;
    }
    if (d.state === "leased") {
      this.lease += 1;
      const after = this.ended;
      this.ended = null;
      return { attempt: this.attempt, lease: this.lease, runner: d.runner, epoch: d.epoch, after };
    }
    return null;
  }
}

function leaseName(l) {
  return "Attempt " + l.attempt + (l.lease > 1 ? ", lease " + l.lease : "");
}

// ---- drawing --------------------------------------------------------------------------------

function showSignIn(message) {
  stop();
  $("board").hidden = true;
  $("sign-out").hidden = true;
  $("who").hidden = true;
  $("offline").hidden = true;
  $("sign-in").hidden = false;
  $("sign-in-error").textContent = message || "";
  $("key").focus();
}

function showBoard() {
  $("sign-in").hidden = true;
  $("board").hidden = false;
  $("sign-out").hidden = false;
  const wanted = location.hash.match(/^#job=([0-9a-f-]{36})$/);
  if (wanted) select(wanted[1]);
  refresh();
  timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
  activityStart();
}

function stop() {
  if (timer) clearInterval(timer);
  timer = null;
  activityStop();
}

function renderPool(p) {
  $("pool-online").textContent = p.runners.online;
  $("pool-dormant").textContent = p.runners.dormant;
  $("pool-never").textContent = p.runners.never;
  $("pool-slots").textContent = p.slots.active + " / " + p.slots.capacity;
  $("pool-parked").textContent = p.jobs.parked;
  $("pool-leased").textContent = p.jobs.leased;
}

// `stale`: the server cannot be reached, so no presence is known: each runner shows
// `unknown` with the presence the server last gave, never a stale `online`.
function renderRunners(runners, stale) {
  labels.clear();
  for (const r of runners) labels.set(r.id, r.label);
  const body = $("runners").tBodies[0];
  const rows = runners.map((r) => {
    const tr = el("tr");
    tr.dataset.runner = r.id;
    const presence = stale ? "unknown" : r.presence;
    tr.dataset.presence = presence;
    const name = el("th");
    name.scope = "row";
    const title = el("span", null, "label");
    title.append(el("span", r.label), " ", el("code", short(r.id), "id"));
    title.title = r.id;
    name.append(title, el("span", r.os || "", "sub"));
    tr.append(name);
    const cell = el("td");
    cell.append(badge(presence, "presence-" + presence));
    const seen = "seen " + ago(r.last_seen_at);
    cell.append(el("span", stale ? "last known " + r.presence + ", " + seen : seen, "sub"));
    tr.append(cell);
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

function renderJobs(jobs) {
  const body = $("jobs").tBodies[0];
  const rows = jobs.map((j) => {
    const tr = el("tr");
    tr.dataset.job = j.id;
    tr.dataset.state = j.state;
    tr.dataset.outcome = j.outcome || "";
    const cell = el("th");
    cell.scope = "row";
    const open = el("button", short(j.id), "link");
    open.type = "button";
    open.setAttribute("aria-label", "Show job " + j.id);
    open.addEventListener("click", () => select(j.id));
    cell.append(open);
    tr.append(cell);
    const s = status(j);
    const st = el("td");
    st.append(badge(s.text, s.cls));
    tr.append(st);
    const cmd = el("td", commandText(j), "command-cell");
    cmd.title = commandText(j);
    tr.append(cmd, el("td", target(j)), el("td", attemptText(j)), el("td", ago(j.created_at)));
    if (j.id === selected) tr.classList.add("selected");
    return tr;
  });
  body.replaceChildren(...rows);
  const filtered = $("filter-state").value || $("filter-outcome").value;
  $("jobs-empty").textContent = filtered ? "No jobs match these filters." : "No jobs yet.";
  $("jobs-empty").hidden = jobs.length > 0;
}

async function recentJobs() {
  let q = "/v1/jobs?order=desc&limit=" + RECENT;
  for (const [name, id] of [["state", "filter-state"], ["outcome", "filter-outcome"]]) {
    if ($(id).value) q += "&" + name + "=" + encodeURIComponent($(id).value);
  }
  return (await api(q)).jobs;
}

async function allEvents(id) {
  let events = [];
  let after = 0;
  for (let i = 0; i < EVENT_PAGES; i++) {
    const page = await api("/v1/jobs/" + id + "/events?after=" + after);
    events = events.concat(page.events);
    if (page.events.length === 0 || page.next === after) break;
    after = page.next;
    if (page.events.length < 1000) break;
  }
  return events;
}

async function renderJob(id) {
  const [job, events, artifacts] = await Promise.all([
    api("/v1/jobs/" + id),
    allEvents(id),
    api("/v1/jobs/" + id + "/artifacts"),
  ]);
  if (selected !== id) return;
  const s = status(job);
  $("job-badge").replaceChildren(badge(s.text, s.cls + " big"));
  $("job-command").textContent = commandText(job);
  $("job-cancel").hidden = job.state !== "parked" && job.state !== "leased";
  $("job-retry").hidden = job.state === "parked";
  const facts = $("job-facts");
  const pairs = [
    ["Status", s.text],
    ["State", job.state],
    ["Target", target(job)],
  ];
  if (job.required_capabilities && job.required_capabilities.length)
    pairs.push(["Requires", job.required_capabilities.join(", ")]);
  if (job.waiting) pairs.push(["Waiting", waitingText(job)]);
  pairs.push(
    ["Attempt", attemptText(job)],
    ["Leases of this attempt", job.attempts + " of " + job.max_attempts],
    ["Created", new Date(job.created_at).toLocaleString()],
    ["Finished", job.finished_at ? new Date(job.finished_at).toLocaleString() : "–"],
  );
  const waited = duration(job.created_at, job.leased_at);
  if (waited) pairs.push(["Waited for a runner", waited]);
  if (job.payload && typeof job.payload.timeout_s === "number") {
    const t = job.payload.timeout_s;
    pairs.push(["Timeout", t < 120 ? t + " s" : Math.floor(t / 60) + " min" + (t % 60 ? " " + Math.round(t % 60) + " s" : "")]);
  }
  const took = duration(job.leased_at, job.finished_at);
  if (took) pairs.push(["Duration", took]);
  const exit = exitText(job);
  if (exit) pairs.push(["Exit", exit]);
  if (job.not_before) pairs.push(["Retries at", new Date(job.not_before).toLocaleString()]);
  if (job.error) {
    const why = reasonText(job.error.reason);
    const m = job.error.message || "";
    // "cancelled by alice" says it all; else the reason in words, then the message.
    pairs.push(["Error", m.startsWith(why) ? m : m && m !== job.error.reason ? why + ": " + m : why]);
  }
  if (job.provenance && job.provenance.runner) pairs.push(["Ran on", runnerName(job.provenance.runner)]);
  if (job.dispatched_by) pairs.push(["Dispatched by", job.dispatched_by.subject + " (" + job.dispatched_by.role + ")"]);
  pairs.push(["Id", job.id]);
  facts.replaceChildren(
    ...pairs.map(([k, v]) => {
      const d = el("div");
      d.append(el("dt", k), el("dd", v));
      return d;
    }),
  );
  facts.dataset.state = job.state;
  facts.dataset.outcome = job.outcome || "";
  renderLog(events);
  rawLog(id, events);
  renderTimeline(job, events);
  renderEvents(events);
  renderArtifacts(id, artifacts);
}

// The log as text: each lease's standard output and error, lines in the order they were
// shipped, under a heading naming its attempt.
// A line's text with its ANSI colour codes (SGR: 30-37, 90-97, bold, reset) rendered as
// spans, and every other escape sequence dropped; the text itself only ever as text.
function paint(line) {
  const raw = line.dataset.raw;
  const parts = [];
  let fg = null;
  let bold = false;
  let at = 0;
  const csi = /\x1b\[([0-9;?]*)([@-~])|\x1b[@-Z\\-_]?/g;
  const push = (text) => {
    if (!text) return;
    const cls = [fg !== null ? "ansi-fg-" + fg : "", bold ? "ansi-bold" : ""].filter(Boolean).join(" ");
    parts.push(cls ? el("span", text, cls) : document.createTextNode(text));
  };
  for (const m of raw.matchAll(csi)) {
    push(raw.slice(at, m.index));
    at = m.index + m[0].length;
    if (m[2] !== "m") continue;
    for (const p of (m[1] || "0").split(";").map(Number)) {
      if (p === 0) { fg = null; bold = false; }
      else if (p === 1) bold = true;
      else if (p === 22) bold = false;
      else if (p === 39) fg = null;
      else if (p >= 30 && p <= 37) fg = p - 30;
      else if (p >= 90 && p <= 97) fg = p - 90 + 8;
    }
  }
  push(raw.slice(at));
  line.replaceChildren(...parts);
}

// A job's output as plain text (what it wrote, escape sequences stripped), behind the log's
// "raw text" link as a file to download.
let rawUrl = null;
let rawText = null;
function rawLog(id, events) {
  const text = events
    .filter((e) => (e.kind === "stdout" || e.kind === "stderr") && e.data)
    .map((e) => (typeof e.data.text === "string" ? e.data.text : typeof e.data.line === "string" ? e.data.line + "\n" : ""))
    .join("")
    .replace(/\x1b\[[0-9;?]*[@-~]|\x1b[@-Z\\-_]?/g, "");
  const link = $("log-raw");
  // The same text keeps its URL (the page refreshes; a link being followed stays valid).
  if (rawUrl && rawText === text && link.download === "job-" + id + ".log") return;
  if (rawUrl) URL.revokeObjectURL(rawUrl);
  rawText = text;
  rawUrl = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
  link.href = rawUrl;
  link.download = "job-" + id + ".log";
  link.hidden = text === "";
}

function renderLog(events) {
  const attempts = new Attempts();
  const blocks = [];
  let block = null;
  let open = null; // the last line, while it has no newline yet
  const start = (title, sub) => {
    const section = el("section", null, "log-block");
    const head = el("h4");
    head.append(el("span", title), el("span", sub || "", "sub"));
    const pre = el("pre", null, "log");
    pre.tabIndex = 0;
    section.append(head, pre);
    blocks.push(section);
    block = pre;
    open = null;
  };
  for (const e of events) {
    if (e.kind === "state" && e.data) {
      const l = attempts.onState(e.data);
      if (l) start(leaseName(l), "runner " + runnerName(l.runner) + " · epoch " + l.epoch + (l.after ? " · after " + l.after : ""));
      continue;
    }
    if (e.kind !== "stdout" && e.kind !== "stderr") continue;
    const d = e.data || {};
    const text = typeof d.text === "string" ? d.text : typeof d.line === "string" ? d.line + "\n" : null;
    if (text === null) continue;
    if (!block) start("Output", "");
    const parts = text.split("\n");
    parts.forEach((part, i) => {
      const last = i === parts.length - 1;
      if (last && part === "") {
        open = null;
        return;
      }
      if (i === 0 && open && open.dataset.stream === e.kind) {
        open.dataset.raw += part;
        paint(open);
      } else {
        const line = el("span", null, "line " + e.kind);
        line.dataset.stream = e.kind;
        line.dataset.raw = part;
        // When the line was written (its event's time), on hover and for tools.
        line.dataset.at = e.at || "";
        line.title = clock(e.at);
        paint(line);
        block.append(line);
        open = line;
      }
      if (!last) open = null;
    });
  }
  for (const b of blocks) {
    const pre = b.querySelector("pre");
    if (!pre.firstChild) pre.append(el("span", "no output", "none"));
  }
  if (blocks.length === 0) blocks.push(el("p", "No output yet.", "empty"));
  $("log").replaceChildren(...blocks);
}

// What happened to the job, in order: dispatch, each lease, what ended it, how the job ended.
function renderTimeline(job, events) {
  const attempts = new Attempts();
  const items = [];
  const item = (cls, title, sub, at) => {
    const li = el("li", null, cls);
    li.append(el("span", title, "what"), el("span", sub, "sub"), el("time", clock(at), "sub"));
    items.push(li);
  };
  for (const e of events) {
    if (e.kind !== "state" || !e.data) continue;
    const d = e.data;
    const l = attempts.onState(d);
    if (l) {
      item("leased", leaseName(l) + ": started", "runner " + runnerName(l.runner), e.at);
    } else if (d.state === "parked" && d.reason === "retry") {
      item("retry", "Attempt " + d.attempt + " ended: " + reasonText(d.after || "retry"), "parked again for a retry", e.at);
    } else if (d.state === "parked" && (!d.reason || d.reason === "dispatched")) {
      item("parked", "Dispatched", "waiting for a runner", e.at);
    } else if (d.state === "parked") {
      item("parked", "Lease ended: " + reasonText(d.reason), "parked again; the next lease runs it", e.at);
    } else if (d.state === "completed") {
      const s = status(job);
      item("end " + s.cls, s.text, "finished on runner " + runnerName(d.runner), e.at);
    } else {
      const title = d.state.charAt(0).toUpperCase() + d.state.slice(1);
      const why = d.reason && d.reason !== d.state ? ": " + reasonText(d.reason) : "";
      item("end outcome-" + (d.state === "failed" ? "failed" : d.state), title + why, d.runner ? "runner " + runnerName(d.runner) : "", e.at);
    }
  }
  $("timeline").replaceChildren(...items);
}

// Every event, as the API gives it (for what the log and timeline leave out).
function renderEvents(events) {
  const list = events.map((e) => {
    const li = el("li");
    li.append(el("span", "#" + e.seq, "seq"), el("span", e.kind, "kind"));
    let text;
    if (e.kind === "state" && e.data) {
      text = [e.data.state, e.data.reason, e.data.epoch !== null && e.data.epoch !== undefined ? "epoch " + e.data.epoch : null]
        .filter(Boolean)
        .join(" · ");
    } else if (e.data && typeof e.data.text === "string") {
      text = e.data.text;
    } else if (e.data && typeof e.data.line === "string") {
      text = e.data.line;
    } else {
      text = JSON.stringify(e.data);
    }
    li.append(el("span", text, "data"), el("time", ago(e.at), "sub"));
    return li;
  });
  $("events").replaceChildren(...list);
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
  history.replaceState(null, "", "#job=" + id);
  $("job").hidden = false;
  $("job-said").textContent = "";
  $("job-title").textContent = "Job " + short(id);
  $("job-title").title = id;
  for (const tr of $("jobs").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.job === id);
  await renderJob(id).catch(fail);
  $("job-title").focus();
}

// Retry or cancel the job shown, as its member may (POST /v1/jobs/{id}/retry|cancel).
async function act(what) {
  const id = selected;
  if (!id) return;
  try {
    const job = await api("/v1/jobs/" + id + "/" + what, "POST");
    $("job-said").textContent =
      what === "retry" ? "Retried: attempt " + attemptText(job) + " is parked." : "Cancel: the job is " + job.state + ".";
    await renderJob(id);
    await refresh();
  } catch (e) {
    if (e instanceof Unauthorized) return fail(e);
    $("job-said").textContent = what + " refused: " + e.message;
  }
}

function fail(e) {
  if (e instanceof Unauthorized) {
    sessionStorage.removeItem(KEY);
    showSignIn("That key was refused. Sign in again.");
    return;
  }
  // The server cannot be reached: say so, and claim no presence we cannot know.
  const since = lastGood ? " What you see is as of " + lastGood.toLocaleTimeString() + "." : "";
  $("offline").textContent = "Cannot reach the server (" + e.message + ")." + since + " Runners show unknown until it answers.";
  $("offline").hidden = false;
  document.body.dataset.stale = "true";
  if (lastRoster) renderRunners(lastRoster, true);
  $("status").textContent = "Could not refresh: " + e.message;
}

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const [pool, roster, jobs] = await Promise.all([api("/v1/pool"), api("/v1/workspace/runners"), recentJobs()]);
    lastGood = new Date();
    lastRoster = roster.runners;
    $("offline").hidden = true;
    delete document.body.dataset.stale;
    renderPool(pool);
    renderRunners(roster.runners, false);
    renderJobs(jobs);
    renderWebhooks();
    if (selected) await renderJob(selected);
    const ws = roster.runners.length ? roster.runners[0].workspace : jobs.length ? jobs[0].workspace : null;
    if (ws) {
      $("who").textContent = "workspace " + ws;
      $("who").hidden = false;
    }
    $("status").textContent = "Updated " + lastGood.toLocaleTimeString();
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
    history.replaceState(null, "", location.pathname);
    $("job").hidden = true;
    $("jobs").focus();
  });
  $("job-retry").addEventListener("click", () => act("retry"));
  $("job-cancel").addEventListener("click", () => act("cancel"));
  for (const id of ["filter-state", "filter-outcome"]) $(id).addEventListener("change", () => refresh());
  $("job-filters").addEventListener("submit", (ev) => ev.preventDefault());
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && selected) $("job-close").click();
  });
  if (key()) showBoard();
  else showSignIn();
});

// ---- The workspace's activity, live from the feed (v1.4), and its webhooks (admin).
// EventSource cannot send a bearer token, so the stream is read with fetch: each frame's `id:`
// is the event's cursor, sent back as Last-Event-ID when the stream ends and is opened again.

const ACTIVITY_KEPT = 100;
let activity = null; // { abort, cursor }

function activityLine(e) {
  const li = el("li");
  const what =
    e.kind === "state"
      ? [e.data.state, e.data.reason !== e.data.state ? e.data.reason : null, e.data.by ? "by " + e.data.by : null]
          .filter(Boolean)
          .join(" ")
      : typeof e.data === "object" && e.data && Object.keys(e.data).length === 1
        ? String(Object.values(e.data)[0])
        : JSON.stringify(e.data);
  const link = el("a", short(e.job_id));
  link.href = "#job=" + e.job_id;
  link.addEventListener("click", (ev) => {
    ev.preventDefault();
    select(e.job_id);
  });
  li.append(el("time", clock(e.at)), " ", link, " ", el("span", e.kind, "kind"), " ", el("span", what));
  return li;
}

function activityShow(events) {
  const list = $("activity");
  for (const e of events) list.prepend(activityLine(e));
  while (list.children.length > ACTIVITY_KEPT) list.lastChild.remove();
  $("activity-empty").hidden = list.children.length > 0;
}

async function activityStart() {
  activityStop();
  const me = { abort: new AbortController(), cursor: null };
  activity = me;
  while (activity === me) {
    const headers = { Authorization: "Bearer " + key(), Accept: "text/event-stream" };
    if (me.cursor) headers["Last-Event-ID"] = me.cursor;
    try {
      const res = await fetch("/v1/events?limit=1000", { headers, cache: "no-store", signal: me.abort.signal });
      if (!res.ok || !res.body) throw new Error(res.statusText);
      const reader = res.body.getReader();
      const text = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += text.decode(value, { stream: true });
        let end;
        const got = [];
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = frame.split("\n").find((l) => l.startsWith("data: "));
          if (!data) continue; // a comment line
          const e = JSON.parse(data.slice(6));
          me.cursor = e.cursor;
          got.push(e);
        }
        if (got.length) activityShow(got);
      }
    } catch (e) {
      if (activity !== me) return;
      await new Promise((r) => setTimeout(r, REFRESH_MS));
    }
  }
}

function activityStop() {
  if (activity) activity.abort.abort();
  activity = null;
}

async function renderWebhooks() {
  let list;
  try {
    list = await api("/v1/webhooks");
  } catch (e) {
    $("webhooks-section").hidden = true; // a member's key: webhooks are the admins'
    return;
  }
  $("webhooks-section").hidden = false;
  const rows = await Promise.all(
    list.webhooks.map(async (w) => {
      const page = await api("/v1/webhooks/" + encodeURIComponent(w.name) + "/deliveries?limit=5").catch(() => ({ deliveries: [] }));
      const tr = el("tr");
      const last = el("td");
      for (const d of page.deliveries) {
        const kind = d.status === "delivered" ? "outcome-succeeded" : d.status === "failed" ? "outcome-failed" : "info";
        const b = badge(d.status + (d.last_status_code ? " " + d.last_status_code : ""), kind);
        b.title = (d.last_error || "") + (d.next_try_at ? " (next try " + clock(d.next_try_at) + ")" : "");
        last.append(b, " ");
      }
      const sends = w.kinds.join(", ") + (w.states ? " (" + w.states.join(", ") + ")" : "");
      const state = el("td");
      state.append(badge(w.status, w.status === "active" ? "outcome-succeeded" : "outcome-failed"));
      tr.append(
        el("td", w.name),
        state,
        el("td", sends),
        el("td", w.url),
        last,
      );
      if (w.disabled_reason) tr.title = w.disabled_reason;
      return tr;
    }),
  );
  $("webhooks").tBodies[0].replaceChildren(...rows);
  $("webhooks-empty").hidden = rows.length > 0;
}
