"use strict";
// ---------------------------------------------------------------- jobs table
// The server filters, sorts and pages the whole workspace (GET /api/v1/jobs): the page
// holds one page of rows, the cursor that reached it, and asks again for that same
// page every 2 s, so a user on page 40 stays on page 40 while jobs arrive.
const JOB_PAGE = 50;
function jobsView() {
  const status = el("select", {id: "f-status"}, el("option", {value: ""}, "any status"),
    ...STATUSES.map((s) => el("option", {value: s}, s)));
  const experiment = el("input", {id: "f-experiment", placeholder: "experiment"});
  const user = el("input", {id: "f-user", placeholder: "user"});
  const tag = el("input", {id: "f-tag", placeholder: "tag or tag=value"});
  const text = el("input", {id: "f-text", placeholder: "search name, user…"});
  // Sweeps' trials are listed under their sweep (its page); here only when asked for.
  const trials = el("input", {type: "checkbox", id: "f-trials"});
  const trialsLabel = el("label", {class: "muted"}, trials, " with sweeps' trials");
  const count = el("span", {class: "muted", id: "count"});
  const prev = el("button", {id: "page-prev", disabled: true}, "‹ previous");
  const next = el("button", {id: "page-next", disabled: true}, "next ›");
  const last = el("button", {id: "page-last", disabled: true}, "last »");
  const first = el("button", {id: "page-first", disabled: true}, "« first");
  const picked = new Set();
  const compare = el("button", {id: "compare", disabled: true, onclick: () => {
    location.href = "/compare?jobs=" + encodeURIComponent([...picked].join(","));
  }}, "Compare selected");
  const body = el("tbody", {id: "jobs"});
  // [header, sort key the server knows (null: not sortable)]
  const columns = [["", null], ["name", "name"], ["display name", "display_name"],
    ["status", "status"], ["user", "user"], ["experiment", "experiment"], ["compute", "compute"],
    ["nodes × procs", null], ["GPUs", null], ["tags", null], ["created", "created"],
    ["duration", "duration"], ["queue", null]];
  const NEWEST_FIRST = new Set(["created", "duration"]);
  let sort = "created", order = "desc", cursor = null, answer = null, shownKey = "", asked = 0;
  const heads = columns.map(([label, key]) => {
    if (!key) return el("th", {}, label);
    const th = el("th", {class: "sortable", "data-sort": key}, label);
    th.addEventListener("click", () => {
      order = sort === key ? (order === "desc" ? "asc" : "desc") : (NEWEST_FIRST.has(key) ? "desc" : "asc");
      sort = key; cursor = null; load();
    });
    return th;
  });
  main.append(el("h1", {}, "Jobs"),
    el("div", {class: "filters"}, status, experiment, user, tag, text, trialsLabel, compare),
    el("div", {class: "filters"}, first, prev, count, next, last),
    el("table", {}, el("thead", {}, el("tr", {}, ...heads)), body));

  function row(j) {
    const [nodes, procs] = shape(j);
    const box = el("input", {type: "checkbox", class: "pick", checked: picked.has(j.name)});
    box.addEventListener("change", () => {
      if (box.checked) picked.add(j.name); else picked.delete(j.name);
      compare.disabled = picked.size < 2;
    });
    return el("tr", {"data-job": j.name}, el("td", {}, box),
      el("td", {}, el("a", {href: "/jobs/" + encodeURIComponent(j.name)}, j.name)),
      el("td", {}, j.display_name || ""), el("td", {}, badge(j.status)),
      el("td", {}, j.created_by || "-"), el("td", {}, j.experiment_name),
      el("td", {}, (j.spec || {}).compute || j.target || "local"),
      el("td", {}, `${nodes} × ${procs}`), el("td", {class: "gpus"}, gpus(j)),
      el("td", {}, chips(j.tags)), el("td", {}, ago(j.created_at)),
      el("td", {}, duration(j)), el("td", {}, queuePlace(j)));
  }
  function render() {
    const jobs = answer.jobs;
    body.replaceChildren(...jobs.map(row));
    const from = jobs.length ? answer.start + 1 : 0;
    count.textContent = `${from.toLocaleString()}–${(answer.start + jobs.length).toLocaleString()}` +
      ` of ${answer.total.toLocaleString()}`;
    prev.disabled = first.disabled = !answer.prev;
    next.disabled = last.disabled = !answer.next;
    for (const th of heads) {
      const key = th.dataset.sort;
      th.classList.toggle("sorted", key === sort);
      if (key) th.dataset.order = key === sort ? order : "";
      const label = th.firstChild;
      if (key) label.textContent = columns.find((c) => c[1] === key)[0] +
        (key === sort ? (order === "desc" ? " ▼" : " ▲") : "");
    }
  }
  function query() {
    const q = new URLSearchParams({limit: String(JOB_PAGE), sort, order});
    if (status.value) q.set("status", status.value);
    for (const [field, name] of [[experiment, "experiment"], [user, "user"], [tag, "tag"], [text, "text"]]) {
      if (field.value.trim()) q.set(name, field.value.trim());
    }
    if (trials.checked) q.set("trials", "true");
    if (cursor) q.set("cursor", cursor);
    return q;
  }
  async function load() {
    const mine = ++asked;  // an older answer arriving late never replaces a newer one
    try {
      const fresh = await api("/jobs?" + query());
      if (mine !== asked) return;
      const key = JSON.stringify(fresh);
      // Redrawn when something changed, or while a job runs (its duration grows).
      if (key !== shownKey || fresh.jobs.some((j) => !TERMINAL.has(j.status))) {
        answer = fresh; shownKey = key; render();
      }
    }
    catch (e) { if (mine === asked) count.textContent = e.message; }
  }
  function go(to) { if (to) { cursor = to; load(); } }
  prev.addEventListener("click", () => go(answer && answer.prev));
  next.addEventListener("click", () => go(answer && answer.next));
  last.addEventListener("click", () => go(answer && answer.last));
  first.addEventListener("click", () => { cursor = null; load(); });
  // A new filter starts at the first page; typing waits for a pause before asking. A
  // pause that changed nothing (its value was already asked for) leaves the page alone.
  let typing = null;
  const filters = () => JSON.stringify([status, experiment, user, tag, text].map((f) => f.value.trim())
    .concat([trials.checked]));
  let askedFor = filters();
  function refilter() {
    if (filters() === askedFor) return;
    askedFor = filters(); cursor = null; load();
  }
  status.addEventListener("change", refilter);
  trials.addEventListener("change", refilter);
  for (const field of [experiment, user, tag, text]) {
    field.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(refilter, 250); });
  }
  load();
  setInterval(load, 2000);  // the same page, followed without a reload
}
