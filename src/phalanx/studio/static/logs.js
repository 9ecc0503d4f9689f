"use strict";
// ---------------------------------------------------------------- logs
const LOG_CAP = 100000;  // lines kept in the page; older ones are paged back in on scroll
const MORE = "… earlier lines load as you scroll up";

function logsPane(name) {
  const picker = el("select", {id: "rank"});
  const query = el("input", {id: "search", placeholder: "search this rank's log"});
  const hits = el("div", {class: "hits", id: "hits"});
  const state = el("span", {class: "muted", id: "log-state"});
  const log = el("div", {id: "log"});
  const pane = el("div", {class: "card"}, el("div", {class: "tools"}, el("h2", {}, "Logs"), picker,
    query, el("button", {onclick: () => find()}, "Search"), state), hits, log);
  query.addEventListener("keydown", (e) => { if (e.key === "Enter") find(); });
  let source = null, starts = {}, known = "", loading = false;
  const path = "/jobs/" + encodeURIComponent(name) + "/logs";

  function line(rank, text, all) {
    const div = el("div", {class: "ln", "data-rank": String(rank)});
    if (all) div.append(el("span", {class: "rk"}, `[${rank}] `));
    div.append(clean(text));
    return div;
  }
  async function open() {
    if (source) source.close();
    const rank = picker.value || "0";
    const all = rank === "all";
    log.replaceChildren(); hits.replaceChildren(); starts = {};
    let pages;
    // A server busy or restarting answers again a moment later: a few tries, not one.
    for (let tries = 1; ; tries++) {
      try { pages = (await api(`${path}/page?rank=${rank}&kib=256`)).pages; break; }
      catch (e) {
        state.textContent = e.message;
        if (tries >= 5) return;
        await new Promise((done) => setTimeout(done, 1000));
      }
    }
    const at = [];
    if (pages.some((page) => page.start > 0)) log.append(el("div", {class: "more"}, MORE));
    for (const page of pages) {
      starts[page.rank] = page.start;
      log.append(...page.lines.map((t) => line(page.rank, t, all)));
      at.push(`${page.rank}:${page.end}`);
    }
    log.scrollTop = log.scrollHeight;
    source = new EventSource(`/api/v1${path}/events?rank=${rank}&at=${at.join(",")}`);
    state.textContent = pane.ended ? "" : "live";
    source.onmessage = (event) => {
      const data = JSON.parse(event.data);
      const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 30;
      for (const [r, t, cont] of data.lines) {
        // The rest of a line shown before (a long line, or one that waited for its end).
        const last = log.lastElementChild;
        if (cont && last && last.dataset.rank === String(r)) last.append(clean(t));
        else log.append(line(r, t, all));
      }
      while (log.childElementCount > LOG_CAP) { log.firstElementChild.remove(); starts = {}; }
      if (stick) log.scrollTop = log.scrollHeight;
    };
    source.addEventListener("end", () => { source.close(); state.textContent = "the job has ended"; });
    source.onerror = () => { state.textContent = "reconnecting…"; };
  }
  // Older lines, from where each shown rank's lines begin (its byte offset). With all
  // ranks, each rank's older page comes as a block, rank by rank, as the page opened
  // (a log line holds no time to merge ranks by).
  async function earlier() {
    const ranks = Object.keys(starts).filter((r) => starts[r] > 0);
    if (loading || !ranks.length) return;
    loading = true;
    const kib = Math.max(4, Math.floor(256 / Object.keys(starts).length));
    const all = picker.value === "all";
    try {
      const pages = await Promise.all(ranks.map((r) =>
        api(`${path}/page?rank=${r}&before=${starts[r]}&kib=${kib}`).then((got) => got.pages[0])));
      const height = log.scrollHeight;
      const marker = log.querySelector(".more");
      if (marker) marker.remove();
      log.prepend(...pages.flatMap((page) => page.lines.map((t) => line(page.rank, t, all))));
      for (const page of pages) starts[page.rank] = page.start;
      if (Object.values(starts).some((start) => start > 0)) log.prepend(el("div", {class: "more"}, MORE));
      log.scrollTop += log.scrollHeight - height;
    } finally { loading = false; }
  }
  log.addEventListener("scroll", () => { if (log.scrollTop < 80) earlier(); });
  async function find() {
    const q = query.value.trim();
    if (!q) { hits.replaceChildren(); return; }
    const rank = picker.value === "all" ? "0" : picker.value;
    try {
      const found = await api(`${path}/search?rank=${rank}&q=${encodeURIComponent(q)}&limit=500`);
      hits.replaceChildren(el("div", {class: "muted"}, `${found.matches.length}${found.complete ? "" : "+"} lines of rank ${rank} hold “${q}”`),
        ...found.matches.map((m) => el("div", {}, el("span", {class: "no"}, String(m.line)), clean(m.text))));
    } catch (e) { hits.replaceChildren(el("div", {class: "error"}, e.message)); }
  }
  picker.addEventListener("change", open);
  pane.ranks = (job) => {
    pane.ended = TERMINAL.has(job.status);
    const ranks = (job.logs && job.logs.user_logs || []).map((p) => p.match(/_(\d+)\.txt$/)[1]);
    if (!ranks.length) ranks.push("0");
    const key = ranks.join(",");
    if (key === known) return;
    const chosen = picker.value || "0";
    known = key;
    picker.replaceChildren(...ranks.map((r) => el("option", {value: r}, `rank ${r}`)),
      el("option", {value: "all"}, "all ranks interleaved"));
    picker.value = ranks.includes(chosen) || chosen === "all" ? chosen : "0";
    if (!source || picker.value !== chosen) open();
  };
  return pane;
}
