// The airlock approval UI: no framework, no build step. Everything shown
// that comes from an agent (paths, diffs, parameters) is set as text, never
// as HTML.
"use strict";

const state = {
  token: null,
  approvals: new Map(), // id -> approval view, while pending
  skewMs: 0,            // server clock minus browser clock
  streamAbort: null,
  lastEventId: null,    // the feed position of the last event read
  view: "pending",
};

const $ = (selector, root = document) => root.querySelector(selector);

// What an agent, a file or an upstream wrote may hold characters that
// change what a person reads: control characters, and bidi overrides that
// reorder the text around them (`evil\u202Etxt.sh`). They are shown as
// visible escapes, as the terminal shows them (airlock_core::display).
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
function safeText(value) {
  return String(value).replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    if (c === "\r") return "\\r";
    if (code < 0x80) return "\\x" + code.toString(16).padStart(2, "0");
    if (code < 0xa0) return "\\u{" + code.toString(16) + "}";
    return "<U+" + code.toString(16).toUpperCase().padStart(4, "0") + ">";
  });
}

// The same, less the carriage return of CRLF line ends: what an editable
// content must not hold.
const UNSAFE_IN_CONTENT = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/;

// Every text the page shows goes through here.
function setText(element, value) {
  element.textContent = safeText(value);
}

function takeTokenFromUrl() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token");
  if (token) {
    sessionStorage.setItem("airlock-token", token);
    // The token leaves the address bar (and the history) at once.
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("airlock-token");
}

class ApiError extends Error {
  constructor(status, body) {
    const message = body && body.error ? body.error.message : `HTTP ${status}`;
    super(message);
    this.status = status;
    this.code = body && body.error ? body.error.code : "http_" + status;
  }
}

async function api(path, options = {}) {
  const headers = { Authorization: "Bearer " + state.token };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    cache: "no-store",
  });
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (response.status === 401) {
    signOut("The token was not accepted.");
  }
  if (!response.ok && response.status !== 202) throw new ApiError(response.status, body);
  return body;
}

function signOut(message) {
  sessionStorage.removeItem("airlock-token");
  state.token = null;
  if (state.streamAbort) state.streamAbort.abort();
  show("login");
  setText($("#login-error"), message || "");
}

function show(view) {
  state.view = view;
  $("#login-view").hidden = view !== "login";
  $("#pending-view").hidden = view !== "pending";
  $("#audit-view").hidden = view !== "audit";
  $("#stats-view").hidden = view !== "stats";
  $("#tab-stats").classList.toggle("active", view === "stats");
  $("#tab-pending").classList.toggle("active", view === "pending");
  $("#tab-audit").classList.toggle("active", view === "audit");
}

// ---------------------------------------------------------------- pending

async function loadPending() {
  const before = Date.now();
  const body = await api("/hitl/pending");
  if (typeof body.now_ms === "number") {
    state.skewMs = body.now_ms - Math.round((before + Date.now()) / 2);
  }
  // Cards shown as pending that no longer are (decided while the stream
  // was away) say what became of them; settled cards stay until dismissed.
  const listed = new Set(body.approvals.map((approval) => approval.id));
  for (const id of [...state.approvals.keys()]) {
    if (!listed.has(id)) showOutcome(id, "").catch(() => {});
  }
  // Newest first, as the API lists them.
  for (const approval of body.approvals.slice().reverse()) addApproval(approval);
  updateCount();
}

function addApproval(approval) {
  if (approval.status !== "pending" || state.approvals.has(approval.id)) return;
  state.approvals.set(approval.id, approval);
  const card = renderCard(approval);
  $("#pending-list").prepend(card); // newest on top
  updateCount();
}

function cardOf(id) {
  return document.querySelector(`li.card[data-id="${CSS.escape(id)}"]`);
}

// What became of an approval, in words, from its view as the API shows it
// now: who decided, through which channel, and whether the change applied.
function outcomeOf(approval) {
  const who = [approval.decided_user, approval.channel ? `via ${approval.channel}` : ""].filter(Boolean).join(" ");
  const by = who ? ` by ${who}` : "";
  const reason = approval.reason ? ` (reason: ${approval.reason})` : "";
  const error = approval.result && approval.result.error;
  const seconds = Math.round((approval.expires_ms - approval.created_ms) / 1000);
  switch (approval.status) {
    case "applied": {
      if (approval.undone) return { good: false, text: `Approved${by}, applied, then undone` };
      const mismatch = approval.result && approval.result.data && approval.result.data.apply_mismatch;
      if (Array.isArray(mismatch)) {
        const paths = mismatch.map((file) => file.path).join(", ");
        return { good: false, text: `Approved${by}, but the agent left ${paths} not as approved (apply_mismatch)` };
      }
      return { good: true, text: `Approved${by} and applied${reason}` };
    }
    case "approved":
    case "applying":
      return { good: true, text: `Approved${by}; applying…` };
    case "failed":
      return {
        good: false,
        text: `Approved${by}, but not applied: ` + (error
          ? (error.code === "stale"
            ? "stale: the file changed after this was proposed; nothing was written"
            : `${error.code}: ${error.message}`)
          : "it failed"),
      };
    case "denied":
      return { good: false, text: `Denied${by}${reason}` };
    case "expired":
      return { good: false, text: `Expired: no decision in ${seconds} s, so denied` };
    case "cancelled":
      return { good: false, text: "Cancelled: the agent stopped waiting" };
    default:
      return null;
  }
}

// A card whose approval is no longer pending shows what became of it
// (whoever decided, wherever) until it is dismissed; it never just vanishes.
function settleCard(approval, note) {
  const card = cardOf(approval.id);
  state.approvals.delete(approval.id);
  updateCount();
  if (!card) return;
  const outcome = outcomeOf(approval);
  if (!outcome) return;
  card.classList.add("settled");
  card.dataset.status = approval.undone ? "undone" : approval.status;
  $(".decide", card).hidden = true;
  $(".editor", card).hidden = true;
  // The countdown stops (a card settled before has none left).
  const countdown = $(".countdown", card);
  if (countdown) {
    countdown.classList.remove("countdown", "soon");
    setText(countdown, "decided");
  }
  const box = $(".outcome", card);
  box.hidden = false;
  box.classList.toggle("good", outcome.good);
  box.classList.toggle("bad", !outcome.good);
  setText($(".outcome-text", card), (note ? note + " " : "") + outcome.text + ".");
}

// After this page's own decision (or its refusal): the approval as it is now.
async function showOutcome(id, note) {
  try {
    settleCard(await api(`/hitl/pending/${encodeURIComponent(id)}`), note);
  } catch (e) {
    const card = cardOf(id);
    state.approvals.delete(id);
    updateCount();
    if (!card) return;
    card.classList.add("settled");
    $(".decide", card).hidden = true;
    const box = $(".outcome", card);
    box.hidden = false;
    box.classList.add("bad");
    setText($(".outcome-text", card), e.status === 404 ? "This approval no longer exists." : e.message);
  }
}

function removeApproval(id) {
  state.approvals.delete(id);
  const card = cardOf(id);
  if (card) card.remove();
  updateCount();
}

// The batch bar shows what is selected; each card whose session has
// several approvals waiting offers to approve them all.
function updateBatch() {
  const selected = [...document.querySelectorAll("li.card:not(.settled) .select:checked")];
  $("#batch-bar").hidden = selected.length === 0;
  setText($("#batch-count"), `${selected.length} selected`);
  const bySession = new Map();
  for (const approval of state.approvals.values()) {
    if (!approval.session) continue;
    bySession.set(approval.session, (bySession.get(approval.session) || 0) + 1);
  }
  for (const card of document.querySelectorAll("li.card:not(.settled)")) {
    const approval = state.approvals.get(card.dataset.id);
    const button = $(".session-all", card);
    const n = approval && approval.session ? bySession.get(approval.session) || 0 : 0;
    button.hidden = n < 2;
    if (n >= 2) setText(button, `Approve all ${n} from this session`);
  }
}

// Several approvals decided in one request, each its own decision, in the
// order they were made; every card then shows what became of it.
async function decideBatch(ids, decision) {
  const error = $("#batch-error");
  setText(error, "");
  try {
    const body = await api("/hitl/decide-batch", { method: "POST", body: { ids, decision } });
    for (const result of body.results) {
      if (result.outcome === "skipped") {
        const card = cardOf(result.id);
        if (card) setText($(".error", card), "Left pending: an earlier change in the batch could not be applied.");
      } else {
        await showOutcome(result.id, "");
      }
    }
  } catch (e) {
    setText(error, e.message);
  }
  updateBatch();
}

function selectedIds() {
  return [...document.querySelectorAll("li.card:not(.settled) .select:checked")].map((box) => box.closest("li.card").dataset.id);
}

// The session filter: every session an approval waits in (and the one
// chosen, while it is), and the cards of the one chosen only.
function updateSessionFilter() {
  const select = $("#pending-session");
  const chosen = select.value;
  const sessions = new Set();
  for (const approval of state.approvals.values()) {
    if (approval.session) sessions.add(approval.session);
  }
  if (chosen) sessions.add(chosen);
  const wanted = ["", ...[...sessions].sort()];
  const have = [...select.options].map((option) => option.value);
  if (wanted.join("\n") !== have.join("\n")) {
    select.replaceChildren();
    for (const value of wanted) {
      const option = document.createElement("option");
      option.value = value;
      option.textContent = value || "All sessions";
      select.append(option);
    }
    select.value = chosen;
  }
  $("#session-filter").hidden = sessions.size === 0;
  applySessionFilter();
}

function applySessionFilter() {
  const chosen = $("#pending-session").value;
  for (const card of document.querySelectorAll("#pending-list li.card")) {
    card.hidden = chosen !== "" && card.dataset.session !== chosen;
  }
}

function updateCount() {
  updateBatch();
  updateSessionFilter();
  const count = state.approvals.size;
  setText($("#pending-count"), String(count));
  $("#pending-empty").hidden = count > 0;
  document.title = count > 0 ? `(${count}) airlock approvals` : "airlock approvals";
}

function renderCard(approval) {
  const card = $("#card-template").content.firstElementChild.cloneNode(true);
  card.dataset.id = approval.id;
  const decision = approval.decision || {};
  const risk = $(".risk", card);
  setText(risk, approval.risk);
  risk.classList.add(approval.risk);
  setText($(".tool", card), approval.tool);
  setText($(".summary", card), approval.summary || approval.path || "");
  const requester = [approval.agent, approval.user].filter(Boolean).join(" for ");
  setText($(".requester", card), requester || "unknown");
  setText($(".session", card), approval.session || "none");
  card.dataset.session = approval.session || "";
  setText($(".id", card), approval.id);
  const countdown = $(".countdown", card);
  countdown.dataset.expires = String(approval.expires_ms);
  tick(countdown);
  renderDiff($(".diff", card), approval.diff || "");

  const reasonLabel = $(".reason-label", card);
  const reason = $(".reason", card);
  if (decision.require_reason) {
    reasonLabel.classList.add("required");
    reason.required = true;
    setText($(".reason-need", card), "(required)");
  }
  // Only the always-allows that apply to this call, each stated in full
  // before it can be chosen.
  const offers = approval.always || {};
  const scope = $(".scope", card);
  for (const [value, label] of [["session", "this session"], ["persistent", "every session"]]) {
    if (!offers[value]) continue;
    const option = document.createElement("option");
    option.value = value;
    option.textContent = label;
    scope.append(option);
  }
  if (scope.options.length) {
    $(".always-row", card).hidden = false;
    const says = () => setText($(".always-says", card), "Approves, and from now on will " + offers[scope.value] + ".");
    scope.addEventListener("change", says);
    says();
  }
  const edit = $(".edit", card);
  if (approval.editable) {
    edit.hidden = false;
    edit.addEventListener("click", () => openEditor(card, approval));
  }
  $(".dismiss", card).addEventListener("click", () => removeApproval(approval.id));
  $(".select", card).addEventListener("change", updateBatch);
  $(".session-all", card).addEventListener("click", () => {
    const ids = [...state.approvals.values()]
      .filter((other) => other.session === approval.session)
      .map((other) => other.id);
    decideBatch(ids, "approve");
  });
  $(".approve", card).addEventListener("click", () => decide(card, approval, "approve"));
  $(".deny", card).addEventListener("click", () => decide(card, approval, "deny"));
  return card;
}

// A unified diff, one collapsible block per file; lines coloured by kind.
// Hunks are read by their line counts (`@@ -a,b +c,d @@`), so a file's own
// lines can never pass for a header: a removed "-- x" or an added "++ y"
// stays a line of the file it belongs to.
function parseDiff(diff) {
  const lines = diff.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const files = [];
  let current = null;
  let oldLeft = 0;
  let newLeft = 0;
  const push = (text, kind) => {
    if (!current) {
      current = { name: "changes", lines: [] };
      files.push(current);
    }
    current.lines.push({ text, kind });
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (oldLeft > 0 || newLeft > 0) {
      if (line.startsWith("+")) { newLeft--; push(line, "add"); }
      else if (line.startsWith("-")) { oldLeft--; push(line, "del"); }
      else if (line.startsWith("\\")) { push(line, "note"); }
      else { oldLeft--; newLeft--; push(line, "ctx"); }
      continue;
    }
    const hunk = line.match(/^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/);
    if (hunk) {
      oldLeft = hunk[1] === undefined ? 1 : Number(hunk[1]);
      newLeft = hunk[2] === undefined ? 1 : Number(hunk[2]);
      push(line, "hunk");
    } else if (line.startsWith("--- ") && i + 1 < lines.length && lines[i + 1].startsWith("+++ ")) {
      const from = line.slice(4);
      const to = lines[i + 1].slice(4);
      current = { name: (to === "/dev/null" ? from : to).replace(/^[ab]\//, ""), lines: [] };
      files.push(current);
      current.lines.push({ text: line, kind: "file" }, { text: lines[i + 1], kind: "file" });
      i++;
    } else {
      push(line, "ctx");
    }
  }
  return files;
}

// Files with more diff lines than this show the first SHOWN_LINES.
const LARGE_FILE_LINES = 200;
const SHOWN_LINES = 80;

function renderDiff(container, diff) {
  container.replaceChildren();
  const files = parseDiff(diff);
  files.forEach((file, index) => {
    const details = document.createElement("details");
    // The first file is always open; the rest too when there are few.
    details.open = index === 0 || files.length <= 3;
    const summary = document.createElement("summary");
    const added = file.lines.filter((l) => l.kind === "add").length;
    const removed = file.lines.filter((l) => l.kind === "del").length;
    setText(summary, `${file.name}  +${added} −${removed}`);
    details.append(summary);
    const pre = document.createElement("pre");
    const addLines = (lines) => {
      for (const line of lines) {
        const span = document.createElement("span");
        span.className = "line " + line.kind;
        setText(span, line.text);
        pre.append(span);
      }
    };
    details.append(pre);
    // A large file shows its first lines; the rest on request, so the
    // decision is never thousands of lines away.
    if (file.lines.length > LARGE_FILE_LINES) {
      addLines(file.lines.slice(0, SHOWN_LINES));
      const more = document.createElement("button");
      more.type = "button";
      more.className = "show-all";
      // What is folded is said, so no change hides below the fold.
      const below = file.lines.slice(SHOWN_LINES);
      const added = below.filter((l) => l.kind === "add").length;
      const removed = below.filter((l) => l.kind === "del").length;
      setText(more, `Show all ${file.lines.length} lines (${added} added and ${removed} removed lines below)`);
      more.addEventListener("click", () => {
        addLines(file.lines.slice(SHOWN_LINES));
        more.remove();
      });
      details.append(more);
    } else {
      addLines(file.lines);
    }
    container.append(details);
  });
  if (files.length === 0) {
    const empty = document.createElement("p");
    empty.className = "empty";
    setText(empty, "No diff (an upstream call: see the parameters).");
    container.append(empty);
  }
}

async function openEditor(card, approval) {
  const error = $(".error", card);
  setText(error, "");
  try {
    const full = await api(`/hitl/pending/${encodeURIComponent(approval.id)}`);
    const text = $(".edit-text", card);
    const proposed = full.proposed_content ?? "";
    // Such characters cannot be shown in a textarea as what they are;
    // editing them blind is left to the terminal (airlock approve --edit).
    if (UNSAFE_IN_CONTENT.test(proposed)) {
      setText(error, "This content holds control or bidi characters; edit it with airlock approve --edit.");
      return;
    }
    text.dataset.crlf = proposed.includes("\r\n") ? "1" : "0";
    text.value = proposed;
    // What the textarea holds (line ends normalised), to tell an edit.
    text.dataset.proposed = text.value;
    $(".editor", card).hidden = false;
    $(".edit", card).hidden = true;
    setText($(".approve", card), "Approve edited");
    // An edited version is never made an always-allow.
    $(".always-row", card).hidden = true;
    // The diff approving would apply, kept live as the text changes: the
    // server computes it as deciding would.
    const editDiff = $(".edit-diff", card);
    renderDiff(editDiff, full.diff || "");
    let timer = null;
    let asked = 0;
    text.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(async () => {
        const mine = ++asked;
        const content = text.dataset.crlf === "1" ? text.value.replace(/\r?\n/g, "\r\n") : text.value;
        try {
          const preview = await api(`/hitl/preview/${encodeURIComponent(approval.id)}`, { method: "POST", body: { content } });
          if (mine === asked) {
            renderDiff(editDiff, preview.diff);
            setText(error, "");
          }
        } catch (e) {
          if (mine === asked) setText(error, e.message);
        }
      }, 200);
    });
    text.focus();
  } catch (e) {
    setText(error, e.message);
  }
}

async function decide(card, approval, decision) {
  const error = $(".error", card);
  setText(error, "");
  const body = { decision };
  const reason = $(".reason", card).value.trim();
  if (reason) body.reason = reason;
  if (decision === "approve") {
    if ((approval.decision || {}).require_reason && !reason) {
      setText(error, `A reason is required to approve ${approval.risk} risk.`);
      $(".reason", card).focus();
      return;
    }
    const editor = $(".editor", card);
    const text = $(".edit-text", card);
    if (!editor.hidden && text.value !== text.dataset.proposed) {
      // A textarea turns CRLF into LF: give a CRLF file its line ends back.
      body.content = text.dataset.crlf === "1" ? text.value.replace(/\r?\n/g, "\r\n") : text.value;
    }
    if ($(".always", card).checked && !$(".always-row", card).hidden) {
      body.always = { scope: $(".scope", card).value };
    }
  }
  const buttons = card.querySelectorAll(".decide button");
  buttons.forEach((b) => { b.disabled = true; });
  try {
    await api(`/hitl/decide/${encodeURIComponent(approval.id)}`, { method: "POST", body });
    await showOutcome(approval.id, "");
  } catch (e) {
    if (e.status === 409 || e.status === 404) {
      // Decided elsewhere first, or ran out: say by whom and how.
      await showOutcome(approval.id, e.code === "expired" ? "Too late:" : "Already decided:");
    } else {
      setText(error, e.message);
      buttons.forEach((b) => { b.disabled = false; });
    }
  }
}

function tick(element) {
  const left = Number(element.dataset.expires) - (Date.now() + state.skewMs);
  if (left <= 0) {
    setText(element, "expired");
    element.classList.add("soon");
    return;
  }
  const seconds = Math.floor(left / 1000);
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  setText(element, h > 0 ? `${h}h ${m}m` : m > 0 ? `${m}m ${String(s).padStart(2, "0")}s` : `${s}s`);
  element.classList.toggle("soon", seconds < 30);
}

setInterval(() => {
  document.querySelectorAll(".countdown").forEach(tick);
}, 1000);

// ---------------------------------------------------------------- live

// Server-sent events read with fetch, so the token goes in a header (an
// EventSource cannot send one).
async function listen() {
  while (state.token) {
    const controller = new AbortController();
    state.streamAbort = controller;
    try {
      const headers = { Authorization: "Bearer " + state.token, Accept: "text/event-stream" };
      // After a reconnect, the feed goes on where it stopped.
      if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
      const response = await fetch("/hitl/events", {
        headers,
        signal: controller.signal,
        cache: "no-store",
      });
      if (response.status === 401) { signOut("The token was not accepted."); return; }
      if (!response.ok) throw new Error("events: HTTP " + response.status);
      setLive(true);
      // Anything that happened while we were away.
      await loadPending();
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          handleEvent(block);
        }
      }
    } catch (e) {
      if (controller.signal.aborted) return;
    }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

// Events after which an approval is no longer pending.
const SETTLED = new Set(["decided", "applied", "failed", "expired", "cancelled", "apply_mismatch"]);

function handleEvent(block) {
  let type = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) type = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    else if (line.startsWith("id:")) state.lastEventId = line.slice(3).trim();
  }
  if (data.length === 0) return;
  let payload;
  try { payload = JSON.parse(data.join("\n")); } catch (_) { return; }
  if (type === "created" && payload.approval) addApproval(payload.approval);
  else if (SETTLED.has(type) && payload.approval) settleCard(payload.approval, "");
  else if (type === "resync") loadPending().catch(() => {});
  if (state.view === "audit" && type !== "created") loadAudit().catch(() => {});
  if (state.view === "stats" && type !== "created") loadStats().catch(() => {});
}

function setLive(on) {
  const live = $("#live");
  live.classList.toggle("on", on);
  live.classList.toggle("off", !on);
  setText(live, on ? "live" : "offline");
}

// ---------------------------------------------------------------- audit

async function loadAudit() {
  const error = $("#audit-error");
  setText(error, "");
  const params = new URLSearchParams({ limit: "500" });
  const event = $("#audit-event").value.trim();
  const filter = $("#audit-filter").value.trim();
  const since = $("#audit-since").value.trim();
  if (event) params.set("event_type", event);
  if (filter) params.set("filter", filter);
  if (since) params.set("since", since);
  try {
    const [verify, audit] = await Promise.all([api("/audit/verify"), api("/audit?" + params)]);
    renderChain(verify);
    renderAudit(audit.records || []);
  } catch (e) {
    setText(error, e.status === 403 ? "The audit log needs an admin token." : e.message);
  }
}

function renderChain(verify) {
  const chain = $("#chain");
  chain.classList.toggle("ok", !!verify.ok);
  chain.classList.toggle("broken", !verify.ok);
  if (verify.ok && verify.records === 0) {
    setText(chain, "No audit records yet.");
  } else if (verify.ok) {
    setText(chain, `Chain verified: ${verify.records} records, last seq ${verify.last_seq}.`);
  } else if (verify.problem) {
    setText(chain, `Chain BROKEN at seq ${verify.first_bad_seq} (line ${verify.line}, byte ${verify.offset}): ${verify.problem}`);
  } else {
    setText(chain, "Chain verifies, but records were lost: " + (verify.repairs || []).join("; "));
  }
}

function renderAudit(records) {
  const body = $("#audit-table tbody");
  body.replaceChildren();
  for (const record of records.slice().reverse()) {
    const row = document.createElement("tr");
    row.dataset.event = record.event || "";
    const cells = [
      record.seq,
      record.ts,
      record.event,
      record.tool,
      record.path,
      record.decision || record.status,
      record.user || record.agent,
      record.hitl_id,
    ];
    for (const value of cells) {
      const cell = document.createElement("td");
      setText(cell, value === undefined || value === null ? "" : String(value));
      row.append(cell);
    }
    body.append(row);
  }
}

// ---------------------------------------------------------------- stats

const SVG = "http://www.w3.org/2000/svg";

function svgElement(name, attributes, text) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  // Names come from agents: only ever text.
  if (text !== undefined) element.textContent = text;
  return element;
}

function seconds(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}

function shortLabel(text, max) {
  const chars = Array.from(text);
  return chars.length > max ? chars.slice(0, max - 1).join("") + "…" : text;
}

async function loadStats() {
  const error = $("#stats-error");
  setText(error, "");
  const since = $("#stats-since").value;
  const query = (by) => {
    const params = new URLSearchParams();
    if (since) params.set("since", since);
    if (by) params.set("by", by);
    return "/v1/stats?" + params;
  };
  try {
    const [all, byRisk, byTool] = await Promise.all([api(query()), api(query("risk")), api(query("tool"))]);
    renderTotals(all);
    renderTimeline(all.timeline, all.timeline_unit);
    renderRisk(byRisk.groups);
    renderTools(byTool.groups);
  } catch (e) {
    setText(error, e.message);
  }
}

function renderTotals(stats) {
  const t = stats.total;
  const items = [
    ["calls", t.calls], ["allowed", t.allowed], ["denied by policy", t.denied_by_policy],
    ["asked", t.asks], ["approved", t.approved], ["edited", t.edited], ["denied", t.denied],
    ["timed out", t.timeouts], ["undone", t.undone],
    ["median decision", seconds(t.decision_ms.p50)], ["90th pct decision", seconds(t.decision_ms.p90)],
    ["grants in force", stats.grants_in_force],
  ];
  const list = $("#stats-totals");
  list.replaceChildren();
  for (const [name, value] of items) {
    const box = document.createElement("div");
    const term = document.createElement("dt");
    const data = document.createElement("dd");
    setText(term, name);
    setText(data, String(value));
    data.dataset.figure = name;
    box.append(term, data);
    list.append(box);
  }
}

// Drawn at the width it is shown at, so its text keeps its size on a phone.
function chartWidth(svg) {
  return Math.max(300, Math.round(svg.getBoundingClientRect().width) || 640);
}

function emptyChart(svg, message) {
  svg.replaceChildren(svgElement("text", { x: 10, y: 24, class: "empty-chart" }, message));
}

function renderTimeline(buckets, unit) {
  const svg = $("#chart-timeline");
  const width = chartWidth(svg), height = 200, left = 34, bottom = 24;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  if (!buckets.length) return emptyChart(svg, "No decisions in this period.");
  const most = Math.max(...buckets.map((b) => b.approved + b.denied + b.timeouts), 1);
  const slot = (width - left) / buckets.length;
  const bar = Math.max(2, Math.min(40, slot * 0.7));
  const scale = (height - bottom - 10) / most;
  svg.replaceChildren(
    svgElement("text", { x: 2, y: 12 }, String(most)),
    svgElement("text", { x: 2, y: height - bottom }, "0"),
  );
  buckets.forEach((b, i) => {
    const x = left + i * slot + (slot - bar) / 2;
    let y = height - bottom;
    for (const [kind, count] of [["approved", b.approved], ["denied", b.denied], ["timeout", b.timeouts]]) {
      if (!count) continue;
      const h = count * scale;
      y -= h;
      const rect = svgElement("rect", { x, y, width: bar, height: h, class: "bar " + kind });
      rect.append(svgElement("title", {}, `${b.at}: ${count} ${kind === "timeout" ? "timed out" : kind}`));
      svg.append(rect);
    }
    if (buckets.length <= 12 || i % Math.ceil(buckets.length / 12) === 0) {
      const label = unit === "hour" ? b.at.slice(11, 16) : b.at.slice(5, 10);
      svg.append(svgElement("text", { x: x, y: height - 8 }, label));
    }
  });
}

function renderRisk(groups) {
  const svg = $("#chart-risk");
  const width = chartWidth(svg), height = 200, left = 70;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const order = ["low", "medium", "high", "critical"];
  const rows = groups
    .filter((g) => g.decision_ms.count > 0)
    .sort((a, b) => order.indexOf(a.key) - order.indexOf(b.key));
  if (!rows.length) return emptyChart(svg, "No decisions in this period.");
  const most = Math.max(...rows.map((g) => g.decision_ms.p90 || 0), 1);
  const band = (height - 10) / rows.length;
  const scale = (width - left - 90) / most;
  svg.replaceChildren();
  rows.forEach((g, i) => {
    const y = 5 + i * band;
    svg.append(svgElement("text", { x: 2, y: y + band / 2 + 4 }, shortLabel(g.key || "(none)", 10)));
    const thick = Math.min(14, band / 3);
    for (const [kind, value, dy] of [["p50", g.decision_ms.p50, band / 2 - thick - 1], ["p90", g.decision_ms.p90, band / 2 + 1]]) {
      const w = Math.max(1, (value || 0) * scale);
      const rect = svgElement("rect", { x: left, y: y + dy, width: w, height: thick, class: "bar " + kind });
      rect.append(svgElement("title", {}, `${g.key}: ${kind} ${seconds(value)}`));
      svg.append(rect, svgElement("text", { x: left + w + 4, y: y + dy + thick - 2 }, seconds(value)));
    }
  });
}

function renderTools(groups) {
  const svg = $("#chart-tools");
  const width = chartWidth(svg), height = 200, left = Math.min(150, Math.round(width * 0.35));
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const rows = groups.filter((g) => g.asks > 0).sort((a, b) => b.asks - a.asks).slice(0, 8);
  if (!rows.length) return emptyChart(svg, "Nothing was asked in this period.");
  const most = Math.max(...rows.map((g) => g.asks), 1);
  const band = (height - 10) / rows.length;
  const scale = (width - left - 40) / most;
  svg.replaceChildren();
  rows.forEach((g, i) => {
    const y = 5 + i * band;
    const thick = Math.min(18, band * 0.7);
    svg.append(svgElement("text", { x: 2, y: y + band / 2 + 4 }, shortLabel(g.key || "(none)", 24)));
    const rect = svgElement("rect", { x: left, y: y + (band - thick) / 2, width: Math.max(1, g.asks * scale), height: thick, class: "bar asks" });
    rect.append(svgElement("title", {}, `${g.key}: ${g.asks} asked`));
    svg.append(rect, svgElement("text", { x: left + g.asks * scale + 4, y: y + band / 2 + 4 }, String(g.asks)));
  });
}

// ---------------------------------------------------------------- start

async function start() {
  show("pending");
  try {
    await loadPending();
  } catch (e) {
    if (e.status === 403) {
      signOut("This token cannot decide approvals (it needs the approver role).");
    } else if (state.token) {
      setText($("#pending-empty"), e.message);
    }
    return;
  }
  listen();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#batch-approve").addEventListener("click", () => decideBatch(selectedIds(), "approve"));
  $("#batch-deny").addEventListener("click", () => decideBatch(selectedIds(), "deny"));
  $("#tab-pending").addEventListener("click", () => { if (state.token) show("pending"); });
  $("#tab-audit").addEventListener("click", () => {
    if (!state.token) return;
    show("audit");
    loadAudit();
  });
  $("#tab-stats").addEventListener("click", () => {
    if (!state.token) return;
    show("stats");
    loadStats();
  });
  $("#stats-since").addEventListener("change", () => loadStats());
  $("#pending-session").addEventListener("change", () => applySessionFilter());
  $("#session-filter").addEventListener("submit", (event) => event.preventDefault());
  $("#stats-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadStats();
  });
  $("#audit-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadAudit();
  });
  $("#login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = $("#login-token").value.trim();
    sessionStorage.setItem("airlock-token", state.token);
    $("#login-token").value = "";
    start();
  });
  state.token = takeTokenFromUrl();
  if (state.token) start();
  else show("login");
});
