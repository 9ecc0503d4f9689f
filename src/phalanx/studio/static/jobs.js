"use strict";
// ---------------------------------------------------------------- jobs table
function jobsView() {
  const status = el("select", {id: "f-status"}, el("option", {value: ""}, "any status"),
    ...STATUSES.map((s) => el("option", {value: s}, s)));
  const experiment = el("input", {id: "f-experiment", placeholder: "experiment"});
  const text = el("input", {id: "f-text", placeholder: "filter by text"});
  const count = el("span", {class: "muted", id: "count"});
  const picked = new Set();
  const compare = el("button", {id: "compare", disabled: true, onclick: () => {
    location.href = "/compare?jobs=" + encodeURIComponent([...picked].join(","));
  }}, "Compare selected");
  const body = el("tbody", {id: "jobs"});
  const columns = ["", "name", "status", "experiment", "compute", "nodes × procs", "GPUs",
    "created", "duration", "queue"];
  main.append(el("h1", {}, "Jobs"), el("div", {class: "filters"}, status, experiment, text, compare, count),
    el("table", {}, el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", {}, c)))), body));
  let jobs = [], shownKey = "";
  function render() {
    const needle = text.value.trim().toLowerCase();
    const shown = jobs.filter((j) => !needle ||
      [j.name, j.display_name, j.experiment_name, j.status, j.created_by].join(" ").toLowerCase().includes(needle));
    body.replaceChildren(...shown.map((j) => {
      const [nodes, procs] = shape(j);
      const box = el("input", {type: "checkbox", class: "pick", checked: picked.has(j.name)});
      box.addEventListener("change", () => {
        if (box.checked) picked.add(j.name); else picked.delete(j.name);
        compare.disabled = picked.size < 2;
      });
      return el("tr", {"data-job": j.name}, el("td", {}, box),
        el("td", {}, el("a", {href: "/jobs/" + encodeURIComponent(j.name)}, j.name)),
        el("td", {}, badge(j.status)), el("td", {}, j.experiment_name),
        el("td", {}, (j.spec || {}).compute || j.target || "local"),
        el("td", {}, `${nodes} × ${procs}`), el("td", {}, gpus(j)),
        el("td", {}, when(j.created_at)), el("td", {}, duration(j)), el("td", {}, queuePlace(j)));
    }));
    count.textContent = `${shown.length} of ${jobs.length}`;
  }
  async function load() {
    const q = new URLSearchParams({limit: "1000"});
    if (status.value) q.set("status", status.value);
    if (experiment.value.trim()) q.set("experiment", experiment.value.trim());
    try {
      const fresh = (await api("/jobs?" + q)).jobs;
      const key = JSON.stringify(fresh);
      // Redrawn when something changed, or while a job runs (its duration grows).
      if (key !== shownKey || fresh.some((j) => !TERMINAL.has(j.status))) {
        jobs = fresh; shownKey = key; render();
      }
    }
    catch (e) { count.textContent = e.message; }
  }
  status.addEventListener("change", load);
  experiment.addEventListener("change", load);
  text.addEventListener("input", render);
  load();
  setInterval(load, 2000);  // the table follows the workspace without a reload
}
