// One job's page, beside the list (app.js): its facts, its log as text per attempt (ANSI colours
// rendered, a raw download), its attempts as a timeline, every event, its artifacts, and the
// Retry and Cancel a member may use. Attempts are numbered as the command line numbers them
// (crates/runner/src/cli/jobs/render.rs, `Attempts`): attempt N is the job's N-th try (its
// retries + 1), and a try's leases are counted within it. Every value from the server reaches
// the page through textContent, never as markup.
"use strict";

const EVENT_PAGES = 20; // at most 20 pages of 1000 events are read for one job

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
