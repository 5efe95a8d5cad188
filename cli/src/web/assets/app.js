// baton web: the board, a key's page and the cluster, kept current from the watch stream.
// Every text from the cluster goes in with textContent, never as HTML.
"use strict";

const TICKER_MAX = 30;
const CLUSTER_EVERY_MS = 3000;
const TICK_MS = 250;

const state = {
  operator: false,
  prefix: "",
  after: "",
  pages: [],
  rows: new Map(), // key -> {row, at}: `at` is performance.now() when the row came
  source: null,
  revision: 0,
  keyView: null,
};

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

// 61000 -> "1m01s"; 850 -> "850ms"; 90000000 -> "1d01h": the CLI's way of saying time left
// (`human_duration` in cli/src/output.rs, which the served page's first board uses), cut
// down to the unit shown.
function human(ms) {
  if (ms <= 0) return "now";
  if (ms < 1000) return Math.floor(ms) + "ms";
  const s = Math.floor(ms / 1000);
  const two = (n) => String(n).padStart(2, "0");
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + two(s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + two(Math.floor((s % 3600) / 60)) + "m";
  return Math.floor(s / 86400) + "d" + two(Math.floor((s % 86400) / 3600)) + "h";
}

function utc(unixMs) {
  return new Date(unixMs).toISOString().replace(/\.\d+Z$/, "Z");
}

// Time left now, counted down from the server's figure on the browser's monotonic clock.
function left(remainingMs, at) {
  return remainingMs - (performance.now() - at);
}

async function api(path, options) {
  const res = await fetch(path, options);
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function showError(id, err) {
  const p = $(id);
  p.hidden = !err;
  p.textContent = err ? String(err.message || err) : "";
}

// Who set a status and in which stint (`status_by_text` in cli/src/web/status_by.rs says
// the same for the served page): "set by alice in a previous stint (token 5)".
function statusByText(by) {
  const verb = by.kind === "posted" ? "posted by" : "set by";
  const who = by.by || "someone";
  if (by.stint === "this") return `${verb} ${who} in this stint (token ${by.token})`;
  if (by.stint === "previous") return `${verb} ${who} in a previous stint (token ${by.token})`;
  return `${verb} ${who} with no one holding`;
}

const BEFORE_HISTORY_TEXT = "set before the kept history";

// ---- the board ------------------------------------------------------------------------

function rowElement(key) {
  return document.querySelector(`#board tbody tr[data-key="${CSS.escape(key)}"]`);
}

function renderRow(row, at) {
  const tr = el("tr");
  tr.dataset.key = row.key;
  if (row.mismatch) tr.classList.add("mismatch");
  const keyCell = el("td");
  const link = el("a", row.key);
  link.href = "/key?key=" + encodeURIComponent(row.key);
  keyCell.append(link);
  tr.append(keyCell);
  const lease = row.lease;
  const a = row.assignment;
  // An assigned key no one holds is a task waiting for its assignee: "unclaimed"; a task no
  // one holds or is assigned is "open" (claim-next takes it).
  // A key held by permits: every holder, the count held of N, and each token; a key held
  // shared: every holder and how many share it.
  const p = row.permits;
  const holder = p
    ? `${p.holders.map((l) => l.holder_name).join(", ")} (${sharedBy(p)})`
    : lease ? lease.holder_name : a ? "unclaimed" : row.open ? "open" : "-";
  tr.append(el("td", holder, lease || (!a && !row.open) ? "holder" : "holder unclaimed"));
  tr.append(el("td", a ? a.to : "-", "assigned"));
  const token = p ? p.holders.map((l) => l.token).join(", ") : lease ? lease.token : "-";
  tr.append(el("td", token, "num token"));
  const expires = el("td", "", "num expires");
  if (lease) {
    expires.dataset.remaining = lease.remaining_ms;
    expires.dataset.at = at;
  } else {
    expires.textContent = "-";
  }
  tr.append(expires);
  const since = lease ? lease.held_since_unix_ms : a ? a.assigned_at_unix_ms : 0;
  tr.append(el("td", since ? utc(since) : "-", "since"));
  const status = el("td", row.status || "", "status");
  // Who set the status, so that a new holder's row does not pass a previous holder's
  // status off as its own.
  if (row.status_by) {
    const previous = row.status_by.stint === "previous" && lease;
    status.append(el("br"));
    status.append(el("span", statusByText(row.status_by), "quiet status-by" + (previous ? " previous" : "")));
  } else if (row.status_before_history) {
    status.append(el("br"));
    status.append(el("span", BEFORE_HISTORY_TEXT, "quiet status-by"));
  }
  if (row.summary) {
    status.append(el("br"));
    status.append(el("span", row.summary, "quiet"));
  }
  tr.append(status);
  const offer = el("td", "", "offer");
  if (row.offer) {
    offer.textContent = "to " + row.offer.to + ", lapses ";
    const lapse = el("span", "", "countdown");
    lapse.dataset.remaining = row.offer.remaining_ms;
    lapse.dataset.at = at;
    offer.append(lapse);
  }
  tr.append(offer);
  const q = el("td", "", "quarantine");
  if (row.quarantine) {
    q.textContent = row.quarantine.revoked ? "revoked, claimable " : "claimable ";
    const until = el("span", "", "countdown");
    until.dataset.remaining = row.quarantine.remaining_ms;
    until.dataset.at = at;
    q.append(until);
  }
  tr.append(q);
  // Who waits in the key's line (claim --wait): how many, and who is next.
  const line = row.line;
  const next = line && line.first.length ? " (next " + line.first[0].holder_name + ")" : "";
  tr.append(el("td", line ? line.waiters + next : "", "waiting"));
  if (state.operator) {
    const td = el("td", "", "op");
    if (lease) {
      const b = el("button", "revoke");
      b.addEventListener("click", () => revoke(row.key, lease.holder_name));
      td.append(b);
    }
    tr.append(td);
  }
  return tr;
}

function upsertRow(row) {
  const at = performance.now();
  const old = rowElement(row.key);
  state.rows.set(row.key, { row, at });
  const tr = renderRow(row, at);
  if (old) {
    old.replaceWith(tr);
  } else {
    // Key order, as the cluster lists them.
    const body = document.querySelector("#board tbody");
    const after = [...body.children].find((r) => r.dataset.key > row.key);
    body.insertBefore(tr, after || null);
  }
  tick();
  $("empty").hidden = state.rows.size > 0;
}

function dropRow(key) {
  const old = rowElement(key);
  if (old) old.remove();
  state.rows.delete(key);
  $("empty").hidden = state.rows.size > 0;
}

async function loadBoard() {
  try {
    const q = new URLSearchParams({ prefix: state.prefix, after: state.after });
    if (state.limit) q.set("limit", state.limit);
    const board = await api("/api/board?" + q);
    showError("board-error", null);
    document.querySelector("#board tbody").replaceChildren();
    state.rows.clear();
    for (const row of board.rows) upsertRow(row);
    $("empty").hidden = board.rows.length > 0;
    state.revision = board.revision;
    state.next = board.next_after;
    $("next").hidden = !board.next_after;
    $("first").hidden = !state.after;
    state.answeredBy = board.answered_by;
    showWhere();
    listen(state.prefix, board.revision + 1);
  } catch (err) {
    showError("board-error", err);
    document.querySelector("#board tbody").replaceChildren();
    state.rows.clear();
  }
}

function showWhere() {
  $("where").textContent = `revision ${state.revision}, board read from ${state.answeredBy}`;
}

// Whether a key belongs on the page shown (its prefix, its range of keys).
function onThisPage(key) {
  if (!key.startsWith(state.prefix)) return false;
  if (state.after && key <= state.after) return false;
  if (state.next && key > state.next) return false;
  return true;
}

async function refreshRow(key) {
  try {
    const answer = await api("/api/row?key=" + encodeURIComponent(key));
    if (answer.row) upsertRow(answer.row);
    else dropRow(key);
  } catch (err) {
    showError("board-error", err);
  }
}

async function revoke(key, holder) {
  const reason = window.prompt(`Revoke ${holder}'s lease on ${key}? Give the reason (it is recorded):`);
  if (!reason) return;
  try {
    await api("/api/revoke", {
      method: "POST",
      headers: { "content-type": "application/json", "x-baton-web": "1" },
      body: JSON.stringify({ key, reason }),
    });
  } catch (err) {
    showError("board-error", err);
  }
}

// ---- live events ----------------------------------------------------------------------

function tickerLine(ev) {
  const who = ev.actor ? ` by ${ev.actor.name || "an operator"}` : "";
  const detail = ev.detail ? `: ${ev.detail}` : "";
  const token = ev.token ? ` (token ${ev.token})` : "";
  return `r${ev.revision} ${ev.key} ${ev.kind}${who}${token}${detail}`;
}

function listen(prefix, from) {
  if (state.source) state.source.close();
  const q = new URLSearchParams({ prefix, from });
  const source = new EventSource("/api/events?" + q);
  state.source = source;
  source.onopen = () => {
    $("live").textContent = "live";
    $("live").className = "quiet live-ok";
  };
  source.onerror = () => {
    $("live").textContent = "reconnecting…";
    $("live").className = "quiet live-bad";
  };
  source.addEventListener("change", (m) => {
    const ev = JSON.parse(m.data);
    state.revision = Math.max(state.revision, ev.revision);
    if (state.keyView === null) showWhere();
    const li = el("li", tickerLine(ev));
    li.dataset.kind = ev.kind;
    const ticker = $("ticker");
    ticker.prepend(li);
    $("ticker-empty").hidden = true;
    while (ticker.children.length > TICKER_MAX) ticker.lastChild.remove();
    if (state.keyView !== null) {
      if (ev.key === state.keyView) loadKey(state.keyView);
    } else if (onThisPage(ev.key)) {
      refreshRow(ev.key);
    }
  });
  source.addEventListener("reload", () => {
    // The events to go on from are gone: read everything again.
    if (state.keyView !== null) loadKey(state.keyView);
    else loadBoard();
  });
  source.addEventListener("trouble", (m) => {
    $("live").textContent = "trouble: " + m.data;
    $("live").className = "quiet live-bad";
  });
}

function tick() {
  for (const cell of document.querySelectorAll("[data-remaining]")) {
    const ms = left(Number(cell.dataset.remaining), Number(cell.dataset.at));
    cell.textContent = ms > 0 ? "in " + human(ms) : "due";
    cell.classList.toggle("expiring", ms < 5000);
  }
}

// ---- a key's page ---------------------------------------------------------------------

function pair(dl, name, value) {
  dl.append(el("dt", name));
  dl.append(el("dd", value));
}

// How many hold a key held by permits ("2/3 permits") or shared ("2 shared").
function sharedBy(p) {
  return p.shared ? `${p.holders.length} shared` : `${p.holders.length}/${p.permits} permits`;
}

async function loadKey(key) {
  try {
    const data = await api("/api/key?key=" + encodeURIComponent(key));
    showError("key-error", null);
    const at = performance.now();
    const view = data.view;
    const record = view.record;
    $("key-title").textContent = key;
    const now = $("key-now");
    now.replaceChildren();
    if (view.permits) {
      const p = view.permits;
      now.append(el("p", p.shared ? `held shared by ${p.holders.length}:` : `held by ${p.holders.length} of ${p.permits} permits:`));
      const holders = el("ul");
      for (const l of view.permits.holders) {
        holders.append(el("li", `${l.holder_name} (client ${l.holder_client_id}) with token ${l.token} since ${utc(l.held_since_unix_ms)}`));
      }
      now.append(holders);
    } else if (view.lease) {
      const p = el("p", `held by ${view.lease.holder_name} (client ${view.lease.holder_client_id}) with token ${view.lease.token} since ${utc(view.lease.held_since_unix_ms)}; expires `);
      const c = el("span");
      c.dataset.remaining = view.lease.remaining_ms;
      c.dataset.at = at;
      p.append(c);
      now.append(p);
    } else {
      now.append(el("p", "free: no one holds it"));
    }
    if (view.quarantine) {
      const p = el("p", view.quarantine.revoked ? "revoked: claimable " : "quarantined: claimable ");
      const c = el("span");
      c.dataset.remaining = view.quarantine.remaining_ms;
      c.dataset.at = at;
      p.append(c);
      now.append(p);
    }
    const dl = $("key-record");
    dl.replaceChildren();
    let setBy = "";
    if (data.status_by) setBy = " — " + statusByText(data.status_by);
    else if (data.status_before_history) setBy = " — " + BEFORE_HISTORY_TEXT;
    pair(dl, "status", (record.status || "(none)") + setBy);
    pair(dl, "summary", record.summary || "(none)");
    const a = record.assigned_to;
    const holder = view.lease ? view.lease.holder_name : null;
    pair(dl, "assigned to", a
      ? `${a.to} by ${a.by}${a.reason ? ": " + a.reason : ""}${holder && a.to !== holder ? " (not the holder: an assignment reserves nothing)" : ""}`
      : "-");
    for (const [k, v] of Object.entries(record.fields || {})) pair(dl, k, v);
    if (record.pending_offer) {
      const o = record.pending_offer;
      pair(dl, "pending offer", `to ${o.to} (from ${o.from.name}, token ${o.from_token}), lapses in ${human(o.remaining_ms)}`);
    }
    const stints = $("key-stints");
    stints.replaceChildren();
    data.stints.forEach((s, i) => {
      const until = s.until_unix_ms ? utc(s.until_unix_ms) : "now";
      const next = data.stints[i + 1];
      let ended = s.ended_by ? `${s.ended_by}${s.end_detail ? " (" + s.end_detail + ")" : ""}` : "holding";
      if (s.ended_by === "accepted") ended = next ? `handed off to ${next.holder_name}` : "handed off";
      stints.append(el("li", `${s.holder_name} (token ${s.token}): ${s.start_compacted ? "before the kept history" : utc(s.from_unix_ms)} → ${until}, ${ended}`));
    });
    if (!data.stints.length) stints.append(el("li", "no one yet", "quiet"));
    renderNote(record.pending_offer ? record.pending_offer.note : record.last_note, !!record.pending_offer);
    const events = $("key-events");
    events.replaceChildren();
    for (const ev of [...data.events].reverse()) events.append(el("li", tickerLine(ev)));
    if (!data.events.length) events.append(el("li", "none kept", "quiet"));
    tick();
  } catch (err) {
    showError("key-error", err);
    // Nothing was read: not "reading" any more.
    const reading = $("key-reading");
    if (reading) reading.remove();
  }
}

function renderNote(note, pending) {
  const box = $("key-note");
  box.replaceChildren();
  if (!note) {
    box.append(el("p", "No handoff yet.", "quiet"));
    return;
  }
  if (pending) box.append(el("p", "Offered, not yet accepted:", "quiet"));
  const dl = el("dl");
  if (note.commit) pair(dl, "commit", note.commit + (note.branch ? ` (${note.branch})` : ""));
  if (note.done) pair(dl, "done", note.done);
  if (note.remaining) pair(dl, "remaining", note.remaining);
  if (note.blocked) pair(dl, "blocked", note.blocked);
  if (note.first_step) pair(dl, "first step", note.first_step);
  if (note.rebuild) pair(dl, "rebuild", note.rebuild);
  // The files, as `baton handoff accept` shows them (note_text in cli/src/note.rs).
  if (note.changed_files && note.changed_files.length) pair(dl, "changed files", note.changed_files.join("\n"));
  const dirty = note.dirty_files || [];
  if (dirty.length) pair(dl, "dirty files", dirty.join("\n"));
  box.append(dl);
  if (dirty.length) {
    box.append(el("p", "The dirty files were uncommitted in the giver's checkout: find out whose they are before tidying anything.", "warn dirty"));
  }
  if (note.volatile_facts && note.volatile_facts.length) {
    box.append(el("p", "Volatile facts: needs verification (claimed when the note was written):"));
    const ul = el("ul", null, "facts");
    for (const f of note.volatile_facts) {
      const li = el("li", `${f.name} = ${f.claimed_value} — check with `, "check");
      li.append(el("code", f.check_command));
      ul.append(li);
    }
    box.append(ul);
  }
}

// ---- the cluster ----------------------------------------------------------------------

async function loadCluster() {
  try {
    const data = await api("/api/cluster");
    const body = document.querySelector("#cluster tbody");
    body.replaceChildren();
    for (const n of data.nodes) {
      const tr = el("tr");
      const s = n.status;
      tr.append(el("td", n.id ?? "?"));
      tr.append(el("td", n.addr));
      if (s) {
        tr.append(el("td", s.state));
        tr.append(el("td", s.leader_id ?? "none"));
        tr.append(el("td", s.term, "num"));
        tr.append(el("td", s.applied_index, "num"));
        tr.append(el("td", s.leases, "num"));
      } else {
        tr.classList.add("down");
        const td = el("td", "does not answer: " + (n.error || ""));
        td.colSpan = 5;
        tr.append(td);
      }
      body.append(tr);
    }
  } catch (err) {
    // The next round tries again.
  }
}

// ---- start ----------------------------------------------------------------------------

async function start() {
  const config = await api("/api/config");
  state.operator = config.operator;
  for (const th of document.querySelectorAll("th.op")) th.hidden = !state.operator;
  const params = new URLSearchParams(location.search);
  setInterval(tick, TICK_MS);
  loadCluster();
  setInterval(loadCluster, CLUSTER_EVERY_MS);
  if (location.pathname === "/key") {
    state.keyView = params.get("key") || "";
    $("board-view").hidden = true;
    $("key-view").hidden = false;
    $("filter").hidden = true;
    document.title = state.keyView + " — baton";
    await loadKey(state.keyView);
    listen(state.keyView, 0);
    return;
  }
  state.prefix = params.has("prefix") ? params.get("prefix") : config.prefix;
  // Keys per page (the server's default, 50, unless the address says otherwise).
  state.limit = params.get("limit") || "";
  $("prefix").value = state.prefix;
  $("filter").addEventListener("submit", (e) => {
    e.preventDefault();
    state.prefix = $("prefix").value;
    state.after = "";
    state.pages = [];
    history.replaceState(null, "", "/?" + new URLSearchParams({ prefix: state.prefix }));
    loadBoard();
  });
  $("next").addEventListener("click", () => {
    state.pages.push(state.after);
    state.after = state.next;
    loadBoard();
  });
  $("first").addEventListener("click", () => {
    state.after = "";
    state.pages = [];
    loadBoard();
  });
  await loadBoard();
}

start();
