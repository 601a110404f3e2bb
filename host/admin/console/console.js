// The botrun console: a page over the token-protected admin API. It draws
// only with textContent, never HTML from the API: payloads and errors are
// whatever users and channels sent.
"use strict";
const tokenKey = "botrun-admin-token";
let token = sessionStorage.getItem(tokenKey) || "";
const $ = (id) => document.getElementById(id);
const pageSize = 50;
const view = { kind: "inbox", state: "dead", chat: "", offset: 0, rows: [] };
const states = {
  inbox: ["", "pending", "processing", "failed", "dead", "done"],
  outbox: ["", "pending", "scheduled", "sending", "failed", "dead", "unknown", "sent"],
};
let timers = [];
let source = null;
// samples are the overviews of the last five minutes, for the counters' rates.
let samples = [];
// gen numbers the views: an answer for an older view is dropped.
let gen = 0;

class Unauthorized extends Error {}

// api calls the admin API with the token; a 401 signs out.
// With opts.missing, a 404 answers null.
async function api(path, opts = {}) {
  const r = await fetch(path, { ...opts, headers: { Authorization: "Bearer " + token } });
  if (r.status === 401) throw new Unauthorized("the admin token was refused");
  if (r.status === 404 && opts.missing) return null;
  if (!r.ok) throw new Error((await r.text()).trim() || "HTTP " + r.status);
  if (r.status === 204) return null;
  return r.json();
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function when(ms) { return ms ? new Date(ms).toLocaleString() : ""; }

// --- sign in and out ---

async function signIn(t) {
  token = t;
  try {
    await api("/admin/overview");
  } catch (err) {
    token = "";
    if (err instanceof Unauthorized) sessionStorage.removeItem(tokenKey);
    $("login-error").textContent = err instanceof Unauthorized ? "Wrong token: the bot refused it." : "Cannot reach the admin API: " + err.message;
    return false;
  }
  sessionStorage.setItem(tokenKey, t);
  $("login-error").textContent = "";
  $("login-view").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  startTail();
  route();
  return true;
}

function signOut(why) {
  token = "";
  sessionStorage.removeItem(tokenKey);
  for (const t of timers) clearInterval(t);
  timers = [];
  stopTail();
  tailLast = "";
  samples = [];
  $("tail").replaceChildren();
  $("app").hidden = true;
  $("logout").hidden = true;
  $("module").textContent = "";
  $("login-view").hidden = false;
  $("login-error").textContent = why || "";
  $("token").value = "";
  $("token").focus();
}

// failed shows err where the view reports errors, or signs out on a 401.
function failed(err, where) {
  if (err instanceof Unauthorized) { signOut("The token was refused: sign in again."); return; }
  $(where).textContent = err.message;
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  signIn($("token").value.trim());
});
$("logout").addEventListener("click", () => signOut(""));

// --- routing: #overview, #inbox, #outbox, #inbox/<id>, #outbox/<key> ---

function route() {
  if (!token) return;
  for (const t of timers) clearInterval(t);
  timers = [];
  gen++;
  shown = null;
  const [kind, ...rest] = (location.hash.slice(1) || "overview").split("/");
  const id = decodeURIComponent(rest.join("/"));
  for (const n of ["overview", "inbox", "outbox", "dryrun"]) {
    if (n === kind) $("nav-" + n).setAttribute("aria-current", "page");
    else $("nav-" + n).removeAttribute("aria-current");
  }
  $("overview-view").hidden = kind === "inbox" || kind === "outbox" || kind === "dryrun";
  $("dryrun-view").hidden = kind !== "dryrun";
  $("list-view").hidden = !((kind === "inbox" || kind === "outbox") && !id);
  $("record-view").hidden = !((kind === "inbox" || kind === "outbox") && id);
  if (kind === "inbox" || kind === "outbox") {
    if (id) showRecord(kind, id);
    else showList(kind);
  } else if (kind === "dryrun") {
    // The form waits for a module.
  } else {
    overview();
    timers.push(setInterval(overview, 5000));
  }
}
window.addEventListener("hashchange", route);

// --- dry run: POST /admin/replay/dry-run with the module as the body ---

$("dryrun-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const file = $("dryrun-module").files[0];
  if (!file) return;
  const q = new URLSearchParams({ name: file.name });
  if ($("dryrun-since").value.trim()) q.set("since", $("dryrun-since").value.trim());
  if ($("dryrun-chat").value.trim()) q.set("chat", $("dryrun-chat").value.trim());
  $("dryrun-btn").disabled = true;
  $("dryrun-error").textContent = "";
  $("dryrun-report").textContent = "";
  $("dryrun-summary").textContent = "running " + file.name + "…";
  try {
    const r = await api("/admin/replay/dry-run?" + q, { method: "POST", body: file });
    const s = r.summary;
    const faults = Object.values(s.new_faults).reduce((a, b) => a + b, 0);
    const cannot = Object.values(s.cannot_replay).reduce((a, b) => a + b, 0);
    $("dryrun-summary").textContent = (r.failed ? "Changed: " : "No change: ") +
      `${s.replayed} replayed, ${s.identical} identical, ${s.changed} changed, ${faults} new faults, ${cannot} cannot replay`;
    $("dryrun-summary").className = r.failed ? "error" : "";
    $("dryrun-report").textContent = r.text;
  } catch (err) {
    $("dryrun-summary").textContent = "";
    failed(err, "dryrun-error");
  } finally {
    $("dryrun-btn").disabled = false;
  }
});

// --- overview ---

// listState is the journal state a queue's records are listed under
// (queued inbox records are pending or failed: the list shows the pending).
const listState = {
  inbox: { queued: "pending", leased: "processing", dead: "dead" },
  outbox: { pending: "pending", deferred: "failed", scheduled: "scheduled", dead: "dead", unknown: "unknown" },
};

const alarming = new Set(["inbound_dead", "outbox_dead", "outbox_ambiguous", "outbox_diverged", "inbound_refused", "modules_refused", "stale_leases"]);

async function overview() {
  const g = gen;
  let o;
  try { o = await api("/admin/overview"); } catch (err) { failed(err, "counters"); return; }
  if (g !== gen) return;
  $("module").textContent = "module " + o.module.slice(0, 12);
  $("module").title = "module sha256 " + o.module;
  const depths = $("depths");
  depths.replaceChildren();
  for (const [box, queues] of [["inbox", o.inbox], ["outbox", o.outbox]]) {
    for (const { queue, records: n } of queues) {
      const s = el("a", null, "stat" + ((queue === "dead" || queue === "unknown") && n > 0 ? " alarm" : ""));
      s.href = "#" + box;
      s.style.textDecoration = "none";
      s.style.color = "inherit";
      s.title = "list the " + box + "'s " + listState[box][queue] + " records";
      s.addEventListener("click", () => { view.kind = box; view.state = listState[box][queue]; view.chat = ""; view.offset = 0; });
      s.append(el("div", n >= o.depth_cap ? o.depth_cap + "+" : n, "n"), el("div", box + " " + queue, "l"));
      depths.append(s);
    }
  }
  // Rates over the last five minutes of samples, once they span 30 s.
  samples = samples.filter((x) => o.at - x.at <= 300000 && x.at < o.at);
  const first = samples[0];
  samples.push(o);
  const counters = $("counters");
  counters.replaceChildren();
  for (const [name, n] of Object.entries(o.counters)) {
    const s = el("div", null, "stat" + (alarming.has(name) && n > 0 ? " alarm" : ""));
    let rate = "";
    if (first && o.at - first.at >= 30000) {
      rate = " · " + (((n - (first.counters[name] || 0)) * 60000) / (o.at - first.at)).toFixed(1) + "/min";
    }
    s.append(el("div", n, "n"), el("div", name.replaceAll("_", " ") + rate, "l"));
    counters.append(s);
  }
  charts(o.last_hour || []);
  modules(o.modules || []);
}

// --- the last hour's charts: inline SVG drawn with DOM calls ---

const svgNS = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// niceMax rounds the series' top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// lineChart draws series (class name -> values, one per minute) into the
// SVG with id, on a shared scale from 0, and writes the scale's top with
// label into the element id-top.
function lineChart(id, series, label) {
  const w = 600, h = 140, top = 14, bottom = h - 4;
  const box = $(id);
  const all = Object.values(series).flat();
  const max = niceMax(Math.max(0, ...all));
  box.replaceChildren(
    svg("line", { x1: 0, x2: w, y1: top, y2: top, class: "grid-line" }),
    svg("line", { x1: 0, x2: w, y1: bottom, y2: bottom, class: "grid-line" }));
  $(id + "-top").textContent = label(max);
  for (const [cls, values] of Object.entries(series)) {
    const n = values.length;
    const pts = values.map((v, i) => {
      const x = n > 1 ? (i * w) / (n - 1) : 0;
      const y = bottom - ((bottom - top) * v) / max;
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    box.append(svg("polyline", { points: pts.join(" "), class: cls }));
  }
}

function seconds(s) {
  if (s >= 1) return s.toFixed(s >= 10 ? 0 : 1) + " s";
  return (s * 1000).toFixed(s >= 0.01 ? 0 : 1) + " ms";
}

function charts(hour) {
  const inbound = hour.map((m) => m.inbound), turns = hour.map((m) => m.turns);
  lineChart("chart-throughput", { in: inbound, turns }, (v) => v + "/min");
  lineChart("chart-latency", { p50: hour.map((m) => m.turn_p50), p99: hour.map((m) => m.turn_p99) }, seconds);
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  const last = hour[hour.length - 1] || { inbound: 0, turns: 0 };
  const t = "last hour: " + sum(inbound) + " inbound, " + sum(turns) + " turns; this minute: " + last.inbound + " inbound, " + last.turns + " turns";
  $("throughput-summary").textContent = t;
  $("chart-throughput").setAttribute("aria-label", "Throughput, " + t);
  const busy = hour.filter((m) => m.turns > 0);
  const worst = busy.length ? Math.max(...busy.map((m) => m.turn_p99)) : 0;
  const l = busy.length ? "worst minute's p99 " + seconds(worst) + "; latest p50 " + seconds(busy[busy.length - 1].turn_p50) + ", p99 " + seconds(busy[busy.length - 1].turn_p99) : "no turns in the last hour";
  $("latency-summary").textContent = l;
  $("chart-latency").setAttribute("aria-label", "Turn latency, " + l);
}

function modules(changes) {
  const list = $("modules");
  list.replaceChildren();
  for (const c of changes.slice().reverse()) {
    const li = el("li", null, c.event);
    li.append(el("b", c.event + " "), el("code", c.digest ? c.digest.slice(0, 12) : "(unread)"), el("span", " · " + when(c.at), "muted"));
    if (c.error) li.append(el("div", c.error, "error"));
    list.append(li);
  }
  if (!changes.length) list.append(el("li", "No module history (the bot runs a native guest).", "muted"));
}

// --- inbox and outbox tables ---

function showList(kind) {
  if (view.kind !== kind) { view.kind = kind; view.offset = 0; view.state = "dead"; }
  $("list-title").textContent = kind === "inbox" ? "Inbox" : "Outbox";
  const sel = $("state");
  sel.replaceChildren();
  for (const s of states[kind]) {
    const o = el("option", s || "any state");
    o.value = s;
    sel.append(o);
  }
  sel.value = view.state;
  $("chat").value = view.chat;
  loadList();
}

async function loadList() {
  const q = new URLSearchParams({ limit: pageSize, offset: view.offset });
  if (view.state) q.set("state", view.state);
  if (view.chat) q.set("chat", view.chat);
  $("list-error").textContent = "";
  $("retry-chat").hidden = !(view.kind === "outbox" && view.chat);
  const g = gen;
  let rows;
  try { rows = await api("/admin/" + view.kind + "?" + q); } catch (err) { failed(err, "list-error"); return; }
  if (g !== gen) return;
  view.rows = rows;
  const inbox = view.kind === "inbox";
  const head = el("tr");
  for (const h of [inbox ? "id" : "key", "state", "chat", "attempts", "updated", "error"]) head.append(el("th", h));
  $("list").tHead.replaceChildren(head);
  const body = $("list").tBodies[0];
  body.replaceChildren();
  for (const r of rows) {
    const id = inbox ? r.id : r.key;
    const tr = el("tr");
    const a = el("a", id);
    a.href = "#" + view.kind + "/" + encodeURIComponent(id);
    a.className = "record-link";
    const td = el("td");
    td.append(a);
    tr.append(td, el("td", r.state, "state-" + r.state), el("td", r.chat), el("td", r.attempts), el("td", when(r.updated_at)), el("td", r.error, "err"));
    body.append(tr);
  }
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", "No records.", "muted");
    td.colSpan = 6;
    tr.append(td);
    body.append(tr);
  }
  $("page-info").textContent = rows.length ? "records " + (view.offset + 1) + "–" + (view.offset + rows.length) : "";
  $("prev").disabled = view.offset === 0;
  $("next").disabled = rows.length < pageSize;
}

$("filter").addEventListener("submit", (e) => {
  e.preventDefault();
  gen++;
  view.state = $("state").value;
  view.chat = $("chat").value.trim();
  view.offset = 0;
  loadList();
});
$("prev").addEventListener("click", () => { gen++; view.offset = Math.max(0, view.offset - pageSize); loadList(); });
$("next").addEventListener("click", () => { gen++; view.offset += pageSize; loadList(); });
$("retry-chat").addEventListener("click", async () => {
  const chat = view.chat;
  if (!(await confirmAction("Retry every dead send of chat " + chat + "?"))) return;
  try {
    const res = await api("/admin/outbox/retry-dead?chat=" + encodeURIComponent(chat), { method: "POST" });
    const failedKeys = Object.keys(res.failed || {});
    $("list-error").textContent = "Retried " + res.retried.length + " sends" + (failedKeys.length ? "; not retried: " + failedKeys.join(", ") : ".");
  } catch (err) { failed(err, "list-error"); return; }
  loadList();
});

// --- one record ---

// findRecord reads one record; null when there is none.
function findRecord(kind, id) {
  return api("/admin/" + kind + "/" + encodeURIComponent(id), { missing: true });
}

function decodePayload(b64) {
  if (!b64) return "";
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
  } catch (e) { return "(binary) " + b64; }
}

// shown is the record on screen, which the action buttons act on.
let shown = null;

// showRecord shows one record and keeps it, and its chat's transcript,
// fresh while it is on screen.
function showRecord(kind, id) {
  $("back").href = "#" + kind;
  $("record-title").textContent = (kind === "inbox" ? "Inbound " : "Send ") + id;
  $("action-result").textContent = "";
  for (const b of ["replay", "retry", "discard"]) $(b).hidden = true;
  $("fields").replaceChildren();
  $("payload").textContent = "";
  $("calls").replaceChildren();
  $("calls-box").hidden = true;
  $("transcript").replaceChildren();
  renderRecord(kind, id);
  timers.push(setInterval(() => renderRecord(kind, id), 2000));
}

async function renderRecord(kind, id) {
  const g = gen;
  let r;
  try { r = await findRecord(kind, id); } catch (err) { failed(err, "action-result"); return; }
  if (g !== gen) return;
  if (!r) {
    shown = null;
    for (const b of ["replay", "retry", "discard"]) $(b).hidden = true;
    $("action-result").textContent = "No such record (discarded, or purged by the retention).";
    $("fields").replaceChildren();
    $("payload").textContent = "";
    return;
  }
  shown = { kind, id, rec: r };
  const fields = $("fields");
  fields.replaceChildren();
  const rows = kind === "inbox"
    ? [["state", r.state], ["chat", r.chat], ["provider", r.provider], ["attempts", r.attempts], ["error", r.error], ["lease owner", r.owner], ["lease until", when(r.lease_until)], ["fencing token", r.token], ["module", r.module], ["retry at", when(r.retry_at)], ["duplicates", r.duplicates], ["created", when(r.created_at)], ["updated", when(r.updated_at)], ["completed", when(r.completed_at)]]
    : [["state", r.state], ["chat", r.chat], ["provider", r.provider], ["attempts", r.attempts], ["error", r.error], ["lease owner", r.owner], ["lease until", when(r.lease_until)], ["fencing token", r.token], ["inbound", r.inbound], ["ref", r.ref], ["retry at", when(r.retry_at)], ["created", when(r.created_at)], ["updated", when(r.updated_at)], ["completed", when(r.completed_at)]];
  for (const [k, v] of rows) {
    if (v === undefined || v === "" || v === null) continue;
    fields.append(el("dt", k), el("dd", v, k === "state" ? "state-" + v : k === "error" ? "error" : ""));
  }
  $("payload").textContent = decodePayload(r.payload);
  $("replay").hidden = !(kind === "inbox" && ["done", "failed", "dead"].includes(r.state));
  $("retry").hidden = !(kind === "outbox" && ["dead", "failed", "unknown"].includes(r.state));
  $("discard").hidden = kind !== "outbox";
  if (kind === "inbox") calls(id); else $("calls-box").hidden = true;
  transcript(r.chat);
}

// calls lists an inbound record's journaled API calls: method, API, path,
// status or failure, time, and a short preview of the answer.
async function calls(id) {
  const g = gen;
  let list;
  try { list = await api("/admin/inbox/" + encodeURIComponent(id) + "/calls"); } catch (err) { failed(err, "action-result"); return; }
  if (g !== gen) return;
  const box = $("calls");
  box.replaceChildren();
  for (const c of list || []) {
    const outcome = c.failed ? "failed: " + c.failed + (c.message ? " (" + c.message + ")" : "") : String(c.status);
    const li = el("li", c.method + " " + c.api + " " + c.path + " → " + outcome + " · " + c.took_ms + " ms · " + when(c.at), c.failed ? "error" : "");
    li.value = c.n;
    if (c.preview) li.append(el("pre", c.preview, "preview"));
    box.append(li);
  }
  $("calls-box").hidden = !(list && list.length);
}

async function transcript(chat) {
  const g = gen;
  let log;
  try { log = await api("/admin/log?chat=" + encodeURIComponent(chat) + "&limit=50"); } catch (err) { failed(err, "action-result"); return; }
  if (g !== gen) return;
  const box = $("transcript");
  box.replaceChildren();
  for (const m of log) box.append(el("div", m.text || "(media)", "msg " + m.direction));
  if (!log.length) box.append(el("p", "Nothing delivered in this chat yet.", "muted"));
}

async function act(what, path) {
  if (!shown) return;
  const { kind, id, rec } = shown;
  if (!(await confirmAction(what + " " + (kind === "inbox" ? "inbound " : "send ") + id + " (chat " + rec.chat + ")?"))) return;
  try {
    await api("/admin/" + kind + "/" + encodeURIComponent(id) + "/" + path, { method: "POST" });
  } catch (err) { failed(err, "action-result"); return; }
  if (path === "discard") { location.hash = "#outbox"; return; }
  $("action-result").textContent = what + ": done.";
  renderRecord(kind, id);
}
$("replay").addEventListener("click", () => act("Replay", "replay"));
$("retry").addEventListener("click", () => act("Retry", "retry"));
$("discard").addEventListener("click", () => act("Discard", "discard"));

// confirmAction asks in a modal dialog; Escape or Cancel says no.
function confirmAction(text) {
  const d = $("confirm");
  $("confirm-text").textContent = text;
  d.returnValue = "";
  d.showModal();
  $("confirm-no").focus();
  return new Promise((ok) => d.addEventListener("close", () => ok(d.returnValue === "yes"), { once: true }));
}

// --- live tail ---

// The live tail opens each stream with a one-use ticket (POST
// /admin/events/ticket with the token in the header): the token never goes in
// a URL, where proxies would log it. A stream that ends (the server ends one
// every 25 s) is opened again with a new ticket, from the last alert seen.
let tailLast = "";
let tailRetry = null;

async function startTail() {
  stopTail();
  let ticket;
  try {
    ticket = (await api("/admin/events/ticket", { method: "POST" })).ticket;
  } catch (err) {
    if (err instanceof Unauthorized) { signOut("The token was refused: sign in again."); return; }
    $("tail-status").textContent = "reconnecting…";
    tailRetry = setTimeout(startTail, 2000);
    return;
  }
  if (!token) return;
  stopTail(); // a second startTail meanwhile
  source = new EventSource("/admin/events?ticket=" + encodeURIComponent(ticket) + (tailLast ? "&last=" + encodeURIComponent(tailLast) : ""));
  source.addEventListener("open", () => { $("tail-status").textContent = "live"; });
  source.addEventListener("error", () => {
    $("tail-status").textContent = "reconnecting…";
    stopTail();
    tailRetry = setTimeout(startTail, 1000);
  });
  source.addEventListener("alert", (e) => {
    tailLast = e.lastEventId;
    const a = JSON.parse(e.data);
    const li = el("li");
    li.append(el("b", a.name + (a.kind ? " (" + a.kind + ")" : "")));
    const what = a.id || a.key;
    const kind = a.kind || (a.key ? "outbox" : "");
    if (what && kind) {
      const link = el("a", what);
      link.href = "#" + kind + "/" + encodeURIComponent(what);
      li.append(link);
    } else if (what) li.append(el("span", what));
    li.append(el("div", [new Date(a.at).toLocaleTimeString(), a.chat && "chat " + a.chat, a.provider, a.error].filter(Boolean).join(" · "), "muted"));
    $("tail").prepend(li);
    while ($("tail").children.length > 100) $("tail").lastChild.remove();
  });
}

function stopTail() {
  clearTimeout(tailRetry);
  tailRetry = null;
  if (source) source.close();
  source = null;
}

if (token) signIn(token);
