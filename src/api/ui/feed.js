// The workspace's activity, live from the feed (v1.4), and its webhooks (admin), beside the
// board (app.js). Every value from the server reaches the page through textContent.
"use strict";

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
