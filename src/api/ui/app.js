// The leasehold page. Reads the public API with the API key kept in this tab's session storage;
// every value from the server reaches the page through textContent, never as markup.
//
// What it shows is held to Buildkite's job page and River's UI: a job's status is its outcome
// (a failed command is red, with its exit code), its log reads as text per attempt, its
// attempts and retries are a timeline, and a member may retry or cancel it.
//
// Three scripts, loaded in order and sharing one global scope: this one signs in, reads the
// API and draws the board (jobs, runners, pool) and what every part says of a job; job.js
// draws one job's page; feed.js the workspace's live activity and its webhooks.
"use strict";

const KEY = "leasehold.key";
const REFRESH_MS = 2000;
const RECENT = 25;

const $ = (id) => document.getElementById(id);
let timer = null;
let selected = null; // id of the job shown
let lastRoster = null; // the last runners the server listed
let lastGood = null; // when the server last answered
const labels = new Map(); // runner id -> label, from the last roster
const commands = new Map(); // job id -> its command as shown, for the jobs the board names

// The list's page, read newest first by the API's cursor (`order=desc&after=`): the cursor it
// is read from (null: the newest jobs), the cursors of the newer pages before it, and the
// cursor of the next older page (null: there is none). A page is read from its cursor at every
// refresh, so it stays put while newer jobs arrive.
const list = { after: null, back: [], older: null };

function key() {
  return sessionStorage.getItem(KEY);
}

class Unauthorized extends Error {}
// The server refused the call as asked (a 4xx but 401): its message says why.
class Refused extends Error {}

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
    throw res.status >= 400 && res.status < 500 ? new Refused(msg) : new Error(msg);
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
    tr.append(slots, running(r.current_jobs || []));
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

// The jobs a runner holds now (its `current_jobs`), each a link to its page, with its command
// once the board knows it.
function running(ids) {
  const cell = el("td", null, "running");
  for (const id of ids) {
    const link = el("a", short(id));
    link.href = "#job=" + id;
    link.dataset.job = id;
    link.title = id;
    link.setAttribute("aria-label", "Show job " + id);
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      select(id);
    });
    cell.append(link);
    if (commands.has(id)) cell.append(el("span", commands.get(id), "sub"));
  }
  if (ids.length === 0) cell.append(el("span", "idle", "sub"));
  return cell;
}

// The commands of the jobs the runners hold that the board has not seen yet: one read each,
// once (a command never changes), at most 50 a refresh.
async function learnCommands(runners) {
  const held = new Set(runners.flatMap((r) => r.current_jobs || []));
  const unknown = [...held].filter((id) => !commands.has(id)).slice(0, 50);
  await Promise.all(
    unknown.map((id) =>
      api("/v1/jobs/" + id)
        .then((j) => commands.set(id, commandText(j)))
        .catch((e) => {
          if (e instanceof Unauthorized) throw e;
        }),
    ),
  );
  for (const id of [...commands.keys()]) if (!held.has(id) && commands.size > 500) commands.delete(id);
}

function renderJobs(jobs, refused) {
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
    commands.set(j.id, commandText(j));
    const cmd = el("td", commandText(j), "command-cell");
    cmd.title = commandText(j);
    tr.append(cmd, el("td", target(j)), el("td", attemptText(j)), el("td", ago(j.created_at)));
    if (j.id === selected) tr.classList.add("selected");
    return tr;
  });
  body.replaceChildren(...rows);
  const search = $("filter-search").value.trim();
  const filtered = $("filter-state").value || $("filter-outcome").value;
  $("jobs-empty").textContent = refused
    ? "Search refused: " + refused
    : search
      ? "No job matches \u201c" + search + "\u201d" + (filtered ? " and these filters" : "") + " (its command or id)."
      : filtered
        ? "No jobs match these filters."
        : list.after
          ? "No older jobs."
          : "No jobs yet.";
  $("jobs-empty").hidden = jobs.length > 0;
  $("jobs-newer").disabled = list.after === null;
  $("jobs-older").disabled = list.older === null;
  $("jobs-page").textContent = list.after === null ? "Newest" : "Page " + (list.back.length + 1);
}

// The list's query: its filters, its search and its page, one more job than it shows (so a
// full last page needs no empty page after it to say it is the last).
function listQuery() {
  let q = "/v1/jobs?order=desc&limit=" + (RECENT + 1);
  for (const [name, id] of [["state", "filter-state"], ["outcome", "filter-outcome"]]) {
    if ($(id).value) q += "&" + name + "=" + encodeURIComponent($(id).value);
  }
  const search = $("filter-search").value.trim();
  if (search) q += "&q=" + encodeURIComponent(search);
  if (list.after) q += "&after=" + list.after;
  return q;
}

// The list's page as `query` reads it: its jobs, the next older page's cursor, and why the
// server refused the search (a 400 names `q`), if it did.
async function recentJobs(query) {
  let page;
  try {
    page = await api(query);
  } catch (e) {
    if (e instanceof Refused) return { jobs: [], older: null, refused: e.message };
    throw e;
  }
  let jobs = page.jobs;
  let older = page.next; // the 4 MiB budget may end a page early
  if (jobs.length > RECENT) {
    jobs = jobs.slice(0, RECENT);
    older = jobs[RECENT - 1].id;
  }
  return { jobs, older, refused: null };
}

// The list from its first page, its filters or search changed.
function listAgain() {
  list.after = null;
  list.back = [];
  list.older = null;
  refresh();
}

function listOlder() {
  if (!list.older) return;
  list.back.push(list.after);
  list.after = list.older;
  list.older = null;
  refresh();
}

function listNewer() {
  if (list.after === null) return;
  list.after = list.back.pop() || null;
  list.older = null;
  refresh();
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

// One refresh at a time; one asked for meanwhile (a search typed, a page turned) runs after it.
let busy = false;
let again = false;
async function refresh() {
  if (busy) {
    again = true;
    return;
  }
  busy = true;
  try {
    const query = listQuery();
    const [pool, roster, page] = await Promise.all([api("/v1/pool"), api("/v1/workspace/runners"), recentJobs(query)]);
    const jobs = page.jobs;
    lastGood = new Date();
    lastRoster = roster.runners;
    $("offline").hidden = true;
    delete document.body.dataset.stale;
    renderPool(pool);
    // A page read for a query since changed is not drawn: the refresh asked for runs next.
    if (query === listQuery()) {
      list.older = page.older;
      renderJobs(jobs, page.refused);
    }
    await learnCommands(roster.runners);
    renderRunners(roster.runners, false);
    renderWebhooks();
    if (selected) await renderJob(selected);
    const ws = roster.runners.length ? roster.runners[0].workspace : jobs.length ? jobs[0].workspace : null;
    if (ws) {
      $("who").textContent = "workspace " + ws;
      $("who").hidden = false;
    }
    $("status").textContent = "Updated " + lastGood.toLocaleTimeString();
    document.body.dataset.ready = "true";
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    fail(e);
  } finally {
    busy = false;
    if (again) {
      again = false;
      refresh();
    }
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
  for (const id of ["filter-state", "filter-outcome"]) $(id).addEventListener("change", listAgain);
  // The search runs as it is typed, a moment after the last key, or at once on Enter.
  let typing = null;
  $("filter-search").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(listAgain, 250);
  });
  $("job-filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    clearTimeout(typing);
    listAgain();
  });
  $("jobs-older").addEventListener("click", listOlder);
  $("jobs-newer").addEventListener("click", listNewer);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && selected) $("job-close").click();
  });
  if (key()) showBoard();
  else showSignIn();
});
