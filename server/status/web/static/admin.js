// The admin page (/debug/status/admin): browse, edit, preview, save and
// see the history of the configuration through the admin API under
// /admin/v1/ (admin/http.go documents its paths and answers). The page
// holds no state of its own but the version it read: a save sends it as
// If-Match, and the API refuses it with 409 when another change came
// first. Source: docs/admin.md, "The page".
"use strict";

const api = "/admin/v1/";
const $ = (id) => document.getElementById(id);
// loaded is the object in the editor: its path, the version read, and
// whether it exists (PUT) or is new (POST).
let loaded = null;

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const tok = sessionStorage.getItem("sluice-admin-token");
  if (tok) h["Authorization"] = "Bearer " + tok;
  return h;
}

// call fetches an API path and returns {status, body, version} (body: the
// parsed JSON answer; version: the ETag's number).
async function call(method, path, body, extra) {
  const init = { method, headers: headers(extra) };
  if (body !== undefined) init.body = body;
  const r = await fetch(api + path, init);
  let b = null;
  try { b = await r.json(); } catch (e) { b = { error: "HTTP " + r.status + " (not JSON)" }; }
  const etag = (r.headers.get("ETag") || "").replace(/^W\//, "").replace(/"/g, "");
  if (etag) $("version").textContent = etag;
  return { status: r.status, body: b, version: etag ? Number(etag) : 0 };
}

function text(el, s) { el.textContent = s; }
function clear() {
  text($("message"), ""); $("errors").replaceChildren(); $("notes").replaceChildren(); text($("diff"), "");
}
function items(ul, list) {
  ul.replaceChildren(...(list || []).map((s) => { const li = document.createElement("li"); li.textContent = s; return li; }));
}
// failed shows an error answer: its message and every error it names.
function failed(r) {
  text($("message"), r.body.error || "HTTP " + r.status);
  $("message").className = "bad";
  items($("errors"), r.body.errors);
  if (r.body.code === "conflict") {
    text($("mode"), "version " + r.body.version + " is current: load the object again to see it, then redo the change");
  } else if (r.status === 401 || r.status === 403) {
    text($("mode"), "not allowed: give a token above (or see the API's authentication flags)");
  }
}

function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  }
  tbody.appendChild(tr);
}
function link(label, onclick, cls) {
  const a = document.createElement("a");
  a.href = "#"; a.textContent = label; if (cls) a.className = cls;
  a.onclick = (e) => { e.preventDefault(); onclick(); };
  return a;
}

// listInto lists a collection (or shows one object) in a table; a
// resource's link also lists its buckets.
async function listInto(tableId, path) {
  const tbody = $(tableId).tBodies[0];
  tbody.replaceChildren();
  const r = await call("GET", path);
  if (r.status !== 200) { failed(r); return; }
  const objs = r.body.objects || [r.body];
  for (const o of objs) {
    const open = () => { load(o.object); if (o.kind === "resource") domains(o.name, o.object); };
    const pre = document.createElement("pre"); pre.textContent = o.yaml;
    row(tbody, [link(o.object, open, "id"), pre]);
  }
  if (objs.length === 0) row(tbody, ["none", ""]);
}
async function domains(name, path) {
  $("domains-box").hidden = false;
  text($("domains-of"), name);
  await listInto("domains", path + "/domains");
}

async function load(path) {
  clear();
  $("path").value = path;
  const r = await call("GET", path);
  if (r.status === 404 && r.body.code === "not_found") {
    loaded = { path, version: r.version || Number($("version").textContent) || 0, exists: false };
    text($("mode"), "new object: save creates it (against version " + loaded.version + ")");
    return;
  }
  if (r.status !== 200) { loaded = null; failed(r); return; }
  loaded = { path, version: r.version, exists: true };
  $("yaml").value = r.body.yaml;
  text($("mode"), "version " + r.version + " read; save sends If-Match: " + r.version);
}

// change sends the editor's YAML (or a delete) with the version read;
// dry: validate and show the diff only.
async function change(dry, del) {
  clear();
  if (!loaded || loaded.path !== $("path").value.trim()) await load($("path").value.trim());
  if (!loaded) return;
  const method = del ? "DELETE" : loaded.exists ? "PUT" : "POST";
  const q = dry ? "?dry_run=true" : "";
  const extra = { "Content-Type": "application/yaml" };
  if (loaded.version) extra["If-Match"] = '"' + loaded.version + '"';
  const r = await call(method, loaded.path + q, del ? undefined : $("yaml").value, extra);
  if (r.status !== 200) { failed(r); return; }
  const res = r.body;
  $("message").className = "";
  if (dry) {
    text($("message"), res.unchanged ? "dry run: no change" : "dry run: this change would make version " + (res.previous_version + 1) + "; nothing stored");
  } else {
    text($("message"), res.unchanged ? "no change" : "saved: version " + res.version);
    loaded = { path: loaded.path, version: res.version, exists: !del };
    text($("mode"), "version " + res.version + " saved; the next save sends If-Match: " + res.version);
    if (res.view && res.view.yaml) $("yaml").value = res.view.yaml;
    history();
    listInto("objects", $("kind").value);
  }
  items($("notes"), res.notes);
  text($("diff"), res.diff || "");
}

async function history() {
  const tbody = $("history").tBodies[0];
  tbody.replaceChildren();
  const r = await call("GET", "history");
  if (r.status !== 200) { failed(r); return; }
  for (const e of r.body.entries || []) {
    const d = e.version > 1 ? link("diff", () => showDiff(e.version - 1, e.version)) : "";
    row(tbody, [String(e.version), new Date(e.time).toISOString().replace("T", " ").slice(0, 19),
      e.user || "", e.op + (e.from ? " to " + e.from : ""), e.object || "", d]);
  }
}
async function showDiff(from, to) {
  $("diff-from").value = from; $("diff-to").value = to || "";
  const r = await call("GET", "diff?from=" + encodeURIComponent(from) + (to ? "&to=" + encodeURIComponent(to) : ""));
  text($("history-diff"), r.status === 200 ? (r.body.diff || "(no difference)") : (r.body.error || "HTTP " + r.status));
}

async function config() {
  const r = await call("GET", "config");
  if (r.status === 200) text($("store"), r.body.store || "");
  else failed(r);
}

$("token").value = sessionStorage.getItem("sluice-admin-token") || "";
$("token-save").onclick = () => { sessionStorage.setItem("sluice-admin-token", $("token").value.trim()); config(); };
$("browse-go").onclick = () => { $("domains-box").hidden = true; listInto("objects", $("kind").value); };
$("kind").onchange = $("browse-go").onclick;
$("load").onclick = () => load($("path").value.trim());
$("preview").onclick = () => change(true, false);
$("save").onclick = () => change(false, false);
$("delete").onclick = () => { if (confirm("delete " + $("path").value + "?")) change(false, true); };
$("diff-go").onclick = () => showDiff($("diff-from").value.trim(), $("diff-to").value.trim());
$("history-go").onclick = history;
config().then(() => { listInto("objects", $("kind").value); history(); });
