// fleetshare dashboard: plain JavaScript over the REST API, no build step, no third parties.
// The token lives in sessionStorage (this tab only) and goes in the Authorization header of
// every request; nothing is shown until the API accepts it. Text from the API is only ever
// set as textContent (never parsed as HTML).
"use strict";

// relative: the page works under a reverse proxy's prefix too (serve --root-path)
const API = "api/v1";
const KEY = "fleetshare-token";
const state = { token: null, me: null, lastEventId: null, stream: null, refreshTimer: null };

// -- helpers -----------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "style") {
      // through the CSSOM: the page's Content-Security-Policy forbids inline style attributes
      for (const declaration of String(value).split(";")) {
        const colon = declaration.indexOf(":");
        if (colon > 0) {
          node.style.setProperty(declaration.slice(0, colon).trim(), declaration.slice(colon + 1).trim());
        }
      }
    }
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function $(id) {
  return document.getElementById(id);
}

class Refused extends Error {}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${state.token}` }, options.headers);
  const response = await fetch(API + path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    signOut("The token was refused (missing, revoked or wrong).");
    throw new Refused("401");
  }
  const body = response.headers.get("content-type")?.includes("json")
    ? await response.json()
    : await response.text();
  if (!response.ok) {
    const error = new Error(detail(body) || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

function detail(body) {
  if (!body || typeof body !== "object") return String(body || "");
  const d = body.detail;
  if (Array.isArray(d)) {
    return d
      .map((item) => {
        const loc = (item.loc || []).filter((p) => p !== "body").join(".");
        return loc ? `${loc}: ${item.msg}` : item.msg;
      })
      .join("; ");
  }
  return String(d);
}

const GIB = 2 ** 30;

function amount(resource, value) {
  if (value === undefined || value === null) return "–";
  if (resource === "memory" || resource.endsWith("memory") || resource === "ephemeral-storage") {
    return `${(value / GIB).toFixed(value % GIB === 0 ? 0 : 1)} Gi`;
  }
  return Number.isInteger(value) ? String(value) : value.toFixed(2);
}

function shortResource(resource) {
  return resource.replace(/^nvidia\.com\//, "").replace(/^aws\.amazon\.com\//, "");
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour12: false });
}

function hours(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 90) return `${seconds.toFixed(0)} s`;
  if (seconds < 5400) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(2)} h`;
}

function money(value) {
  return value === null || value === undefined ? "–" : `$${value.toFixed(3)}`;
}

// -- sign in and out ---------------------------------------------------------------------------

async function signIn(token) {
  state.token = token;
  const me = await api("/whoami"); // 401 signs out again
  state.me = me;
  sessionStorage.setItem(KEY, token);
  $("login").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  $("whoami").textContent = me.scope;
  $("whatif-card").hidden = !me.can_read_policy;
  if (me.can_read_policy) loadPolicy();
  await refresh();
  openStream();
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  state.token = null;
  state.me = null;
  state.lastEventId = null;
  if (state.stream) state.stream.abort();
  state.stream = null;
  $("app").hidden = true;
  $("login").hidden = false;
  $("signout").hidden = true;
  $("whoami").textContent = "";
  $("login-error").textContent = message || "";
  for (const id of ["teams", "idle", "node-groups", "nodes", "pending", "events"]) {
    $(id).replaceChildren();
  }
  setLive(false);
}

// -- the panels --------------------------------------------------------------------------------

async function refresh() {
  if (!state.token) return;
  try {
    const [teams, cluster, nodes, pending] = await Promise.all([
      api("/teams"),
      api("/cluster"),
      api("/nodes"),
      api("/workloads?state=pending&limit=200"),
    ]);
    renderTeams(teams);
    renderIdle(cluster);
    renderNodes(cluster, nodes);
    renderPending(pending.items);
    document.body.dataset.refreshed = String(Date.now());
  } catch (error) {
    if (!(error instanceof Refused)) console.error(error);
  }
}

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refresh, 250);
}

function bar(quota, used, borrowed, scale) {
  const pct = (v) => `${Math.max(0, Math.min(100, (100 * v) / scale)).toFixed(2)}%`;
  const within = Math.max(0, used - borrowed);
  return el(
    "div",
    { class: "bar", title: `quota ${quota}, used ${used}, borrowed ${borrowed}` },
    el("div", { class: "fill used", style: `left:0;width:${pct(within)}` }),
    el("div", { class: "fill borrowed", style: `left:${pct(within)};width:${pct(borrowed)}` }),
    quota > 0 ? el("div", { class: "mark", style: `left:calc(${pct(quota)} - 1px)` }) : null,
  );
}

function cell(team, resource, kind, value) {
  return el(
    "td",
    { class: "num", "data-team": team, "data-resource": resource, "data-kind": kind, "data-value": value ?? 0 },
    amount(resource, value ?? 0),
  );
}

function renderTeams(teams) {
  const box = $("teams");
  box.replaceChildren();
  for (const team of teams) {
    const resources = [...new Set([...Object.keys(team.quota), ...Object.keys(team.used)])].sort(
      (a, b) => order(a) - order(b) || a.localeCompare(b),
    );
    const rows = resources.map((r) => {
      const quota = team.quota[r] || 0;
      const used = team.used[r] || 0;
      const borrowed = team.borrowed[r] || 0;
      return el(
        "tr",
        {},
        el("td", {}, shortResource(r)),
        cell(team.name, r, "quota", quota),
        cell(team.name, r, "used", used),
        cell(team.name, r, "borrowed", borrowed),
        el("td", {}, bar(quota, used, borrowed, Math.max(quota, used) * 1.15 || 1)),
      );
    });
    box.append(
      el(
        "div",
        { class: "team", "data-team": team.name },
        el(
          "h3",
          {},
          team.name,
          el(
            "span",
            { class: "meta" },
            `cohort ${team.cohort || "–"} · `,
            el("span", { "data-team": team.name, "data-kind": "admitted" }, team.admitted),
            " admitted · ",
            el("span", { "data-team": team.name, "data-kind": "pending" }, team.pending),
            " pending",
          ),
        ),
        el(
          "table",
          { class: "grid small" },
          el("tr", {}, el("th", {}, "resource"), el("th", { class: "num" }, "quota"),
            el("th", { class: "num" }, "used"), el("th", { class: "num" }, "borrowed"), el("th", {}, "")),
          rows.length ? rows : el("tr", {}, el("td", { class: "empty", colspan: 5 }, "no quota")),
        ),
      ),
    );
  }
}

function order(resource) {
  if (resource.includes("gpu") || resource.includes("neuron")) return 0;
  if (resource === "cpu") return 1;
  if (resource === "memory") return 2;
  return 3;
}

function renderIdle(cluster) {
  const table = $("idle");
  const rows = Object.entries(cluster.resources)
    .filter(([r]) => !r.startsWith("pods") && r !== "ephemeral-storage")
    .sort(([a], [b]) => order(a) - order(b) || a.localeCompare(b))
    .map(([r, v]) =>
      el(
        "tr",
        { "data-resource": r },
        el("td", {}, shortResource(r)),
        el("td", { class: "num" }, amount(r, v.capacity)),
        el("td", { class: "num" }, amount(r, v.used)),
        el("td", { class: "num", "data-kind": "idle", "data-value": v.idle }, amount(r, v.idle)),
        el("td", {}, bar(0, v.used, 0, v.capacity || 1)),
      ),
    );
  table.replaceChildren(
    el("tr", {}, el("th", {}, "resource"), el("th", { class: "num" }, "capacity"),
      el("th", { class: "num" }, "used"), el("th", { class: "num" }, "idle"), el("th", {}, "")),
    ...rows,
  );
}

function renderNodes(cluster, nodes) {
  const groups = cluster.groups.map((g) =>
    el(
      "tr",
      {},
      el("td", {}, g.instance_type || "(none)"),
      el("td", {}, g.capacity_type),
      el("td", { class: "num" }, g.nodes),
      el("td", { class: "num" }, money(g.price_per_hour)),
    ),
  );
  $("node-groups").replaceChildren(
    el("tr", {}, el("th", {}, "instance type"), el("th", {}, "capacity"),
      el("th", { class: "num" }, "nodes"), el("th", { class: "num" }, "$/hour")),
    ...groups,
    el(
      "tr",
      { class: "total" },
      el("td", { colspan: 2 }, `${cluster.schedulable_nodes} of ${cluster.nodes} schedulable`),
      el("td", { class: "num" }, cluster.nodes),
      el("td", { class: "num", "data-kind": "cost" }, money(cluster.price_per_hour)),
    ),
  );
  $("nodes").replaceChildren(
    el("tr", {}, el("th", {}, "node"), el("th", {}, "type"), el("th", {}, "zone"),
      el("th", {}, "capacity"), el("th", {}, "state"), el("th", { class: "num" }, "$/h"), el("th", {}, "work")),
    ...nodes.map((n) =>
      el(
        "tr",
        {},
        el("td", {}, n.name),
        el("td", {}, n.instance_type || ""),
        el("td", {}, n.zone || ""),
        el("td", {}, n.capacity_type + (n.pool ? ` (${n.pool})` : "")),
        el("td", {}, n.cordoned ? "cordoned" : n.schedulable ? "ready" : "not ready"),
        el("td", { class: "num" }, n.price_per_hour === null ? "" : n.price_per_hour.toFixed(3)),
        el("td", {}, n.workloads.join(", ")),
      ),
    ),
  );
}

function renderPending(items) {
  const table = $("pending");
  const rows = items.map((w) =>
    el(
      "tr",
      { "data-workload": w.name },
      el("td", {}, w.name),
      el("td", {}, w.team),
      el("td", { class: "num" }, w.pods),
      el("td", { class: "num" }, w.queue_position ?? ""),
      el("td", {}, when(w.submitted_at)),
      el("td", { class: "reason" }, w.pending_reason || "not considered yet"),
    ),
  );
  table.replaceChildren(
    el("tr", {}, el("th", {}, "workload"), el("th", {}, "team"), el("th", { class: "num" }, "pods"),
      el("th", { class: "num" }, "#"), el("th", {}, "submitted"), el("th", {}, "why it waits")),
    ...(rows.length ? rows : [el("tr", {}, el("td", { class: "empty", colspan: 6 }, "nothing waits"))]),
  );
}

// -- the live event feed (server-sent events over fetch, so the token goes in a header) -------

function setLive(on) {
  const badge = $("live");
  badge.textContent = on ? "live" : "offline";
  badge.className = `live ${on ? "on" : "off"}`;
}

function describe(event) {
  const d = event.details || {};
  switch (event.kind) {
    case "submit": return `${event.workload} submitted (team ${event.team}, ${d.pods} pods)`;
    case "admit": return `${event.workload} admitted on ${(d.nodes || []).join(", ")}`;
    case "preempt": return `${event.workload} preempted by ${d.by} (${d.reason})`;
    case "pending": return `${event.workload} waits: ${d.reason}`;
    case "finish": return `${event.workload} finished`;
    case "cancel": return `${event.workload} cancelled`;
    case "node": return `node ${d.node} ${d.action}${d.reason ? ` (${d.reason})` : ""}`;
    case "policy": return `policy version ${d.version} (teams ${(d.teams || []).join(", ")})`;
    default: return `${event.workload || ""} ${JSON.stringify(d)}`;
  }
}

function addEvent(event) {
  const list = $("events");
  list.prepend(
    el(
      "li",
      { "data-id": event.id, "data-kind": event.kind, "data-workload": event.workload || "" },
      el("time", { datetime: event.at }, when(event.at)),
      el("span", { class: `kind ${event.kind}` }, event.kind),
      el("span", { class: "what" }, describe(event)),
    ),
  );
  while (list.children.length > 200) list.lastElementChild.remove();
}

async function openStream() {
  const controller = new AbortController();
  state.stream = controller;
  const token = state.token;
  const headers = { Authorization: `Bearer ${token}`, Accept: "text/event-stream" };
  if (state.lastEventId !== null) headers["Last-Event-ID"] = String(state.lastEventId);
  const query = state.lastEventId === null ? "?backlog=50" : "";
  try {
    const response = await fetch(`${API}/events/stream${query}`, { headers, signal: controller.signal });
    if (response.status === 401) {
      signOut("The token was refused (missing, revoked or wrong).");
      return;
    }
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    setLive(true);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const message = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        handleMessage(message);
      }
    }
  } catch (error) {
    if (controller.signal.aborted) return;
  }
  setLive(false);
  if (state.token === token && state.stream === controller) {
    setTimeout(() => state.token === token && openStream(), 2000);
  }
}

function handleMessage(message) {
  let id = null;
  const data = [];
  for (const line of message.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") id = value;
    else if (field === "data") data.push(value);
  }
  if (id !== null && /^\d+$/.test(id)) state.lastEventId = Number(id);
  if (!data.length) return;
  addEvent(JSON.parse(data.join("\n")));
  scheduleRefresh();
}

// -- what-if -----------------------------------------------------------------------------------

async function loadPolicy() {
  try {
    const policy = await api("/policy");
    $("whatif-policy").value = JSON.stringify(policy.policy, null, 2);
  } catch (error) {
    if (!(error instanceof Refused)) $("whatif-error").textContent = error.message;
  }
}

async function runWhatIf(event) {
  event.preventDefault();
  const button = event.target.querySelector("button");
  const format = $("whatif-format").value;
  const text = $("whatif-policy").value;
  let policy = text;
  if (format !== "kueue") {
    try {
      policy = JSON.parse(text);
    } catch (_) {
      policy = text; // YAML text: the server reads it
    }
  }
  $("whatif-error").textContent = "";
  $("whatif-result").replaceChildren(el("p", { class: "notes" }, "simulating…"));
  button.disabled = true;
  try {
    const out = await api("/what-if", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ format, policy, hours: Number($("whatif-hours").value) }),
    });
    renderWhatIf(out);
  } catch (error) {
    $("whatif-result").replaceChildren();
    if (!(error instanceof Refused)) $("whatif-error").textContent = error.message;
  } finally {
    button.disabled = false;
  }
}

function compare(current, proposed, format, lowerIsBetter) {
  const a = current ?? null;
  const b = proposed ?? null;
  let mark = "";
  if (a !== null && b !== null && a !== b) {
    mark = (b < a) === lowerIsBetter ? "better" : "worse";
  }
  return el("td", { class: "num" }, format(a), " → ", el("span", { class: mark }, format(b)));
}

function renderWhatIf(out) {
  const unit = shortResource(out.resource);
  const n = (v) => (v === null || v === undefined ? "–" : String(v));
  const h = (v) => (v === null || v === undefined ? "–" : v.toFixed(2));
  const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)} %`);
  const rows = out.teams.map((t) =>
    el(
      "tr",
      { "data-team": t.team },
      el("td", {}, t.team),
      compare(t.current?.admitted, t.proposed?.admitted, n, false),
      compare(t.current?.wait_p50_seconds, t.proposed?.wait_p50_seconds, hours, true),
      compare(t.current?.wait_p99_seconds, t.proposed?.wait_p99_seconds, hours, true),
      compare(t.current?.borrowed_hours, t.proposed?.borrowed_hours, h, false),
      compare(t.current?.preemptions, t.proposed?.preemptions, n, true),
    ),
  );
  const c = out.current.cluster;
  const p = out.proposed.cluster;
  const b = out.bounds;
  $("whatif-result").replaceChildren(
    el("table", { class: "grid small" },
      el("tr", {}, el("th", {}, "team"), el("th", { class: "num" }, "admitted"),
        el("th", { class: "num" }, "wait p50"), el("th", { class: "num" }, "wait p99"),
        el("th", { class: "num" }, `borrowed ${unit}-h`), el("th", { class: "num" }, "preemptions")),
      ...rows,
      el("tr", { class: "total" }, el("td", {}, "cluster"),
        compare(c.admitted, p.admitted, n, false),
        compare(c.wait_p50_seconds, p.wait_p50_seconds, hours, true),
        compare(c.wait_p99_seconds, p.wait_p99_seconds, hours, true),
        compare(c.borrowed_hours, p.borrowed_hours, h, false),
        compare(c.preemptions, p.preemptions, n, true)),
    ),
    el("p", {}, `${unit} utilisation: `, el("span", { "data-kind": "utilisation" }, pct(c.utilisation)),
      " → ", el("span", {}, pct(p.utilisation)), ` over ${out.hours} h (current → proposed).`),
    el("p", { class: "notes" },
      `${b.running} running, ${b.pending} pending, ${b.replayed} replayed workloads; ` +
      `bounded to ${b.max_workloads} workloads and ${b.max_hours} h` +
      (Object.keys(b.left_out).length ? `; left out: ${JSON.stringify(b.left_out)}` : "") +
      `; took ${out.seconds} s.`),
    ...out.notes.map((note) => el("p", { class: "notes" }, note)),
  );
}

// -- start -------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("login-error").textContent = "";
    const token = $("token").value.trim();
    try {
      await signIn(token);
      $("token").value = "";
    } catch (error) {
      if (!(error instanceof Refused)) $("login-error").textContent = error.message;
    }
  });
  $("signout").addEventListener("click", () => signOut(""));
  $("whatif-form").addEventListener("submit", runWhatIf);
  setInterval(() => state.token && refresh(), 15000);
  const saved = sessionStorage.getItem(KEY);
  if (saved) signIn(saved).catch(() => {});
});
