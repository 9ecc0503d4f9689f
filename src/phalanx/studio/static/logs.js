"use strict";
// ---------------------------------------------------------------- logs
const LOG_CAP = 100000;  // lines kept in the page; older ones are paged back in on scroll
const MORE = "… earlier lines load as you scroll up";
const RANK_COLOURS = 8;  // rank r is drawn in colour r % 8 (studio.css: .rk-0 … .rk-7)

// A line's time as the page shows it: local, to the millisecond; "-" where unknown.
function lineClock(ts) {
  if (ts === null || ts === undefined) return "-";
  const d = new Date(ts * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

function logsPane(name) {
  const picker = el("select", {id: "rank"});
  const query = el("input", {id: "search", placeholder: "search this rank's log"});
  const hits = el("div", {class: "hits", id: "hits"});
  const state = el("span", {class: "muted", id: "log-state"});
  const stamps = el("input", {type: "checkbox", id: "timestamps"});
  const legend = el("span", {class: "legend", id: "legend"});
  const log = el("div", {id: "log"});
  const pane = el("div", {class: "card"}, el("div", {class: "tools"}, el("h2", {}, "Logs"), picker,
    query, el("button", {onclick: () => find()}, "Search"),
    el("label", {}, stamps, " timestamps"), legend, state), hits, log);
  query.addEventListener("keydown", (e) => { if (e.key === "Enter") find(); });
  // Times are always in the page; the toggle only shows them (a class on the log).
  stamps.addEventListener("change", () => log.classList.toggle("stamped", stamps.checked));
  let source = null, starts = {}, known = "", loading = false;
  const hidden = new Set();  // ranks the legend has switched off (all ranks only)
  const path = "/jobs/" + encodeURIComponent(name) + "/logs";

  function line(rank, text, all, ts) {
    const div = el("div", {class: "ln", "data-rank": String(rank)},
      el("span", {class: "ts"}, lineClock(ts) + " "));
    if (all) {
      div.classList.add("rk-" + (rank % RANK_COLOURS));
      if (hidden.has(String(rank))) div.classList.add("off");
      div.append(el("span", {class: "rk"}, `[${rank}] `));
    }
    div.append(clean(text));
    return div;
  }
  // One toggle per rank, in the rank's colour: a click hides or shows its lines.
  function showLegend(ranks, all) {
    legend.replaceChildren(...(all ? ranks : []).map((r) => {
      const chip = el("button", {class: "chip rk-" + (Number(r) % RANK_COLOURS) + (hidden.has(r) ? " off" : ""),
        "data-rank": r, title: `show or hide rank ${r}`}, `rank ${r}`);
      chip.addEventListener("click", () => {
        if (hidden.has(r)) hidden.delete(r); else hidden.add(r);
        chip.classList.toggle("off", hidden.has(r));
        for (const div of log.querySelectorAll(`.ln[data-rank="${r}"]`)) div.classList.toggle("off", hidden.has(r));
      });
      return chip;
    }));
  }
  async function open() {
    if (source) source.close();
    const rank = picker.value || "0";
    const all = rank === "all";
    log.replaceChildren(); hits.replaceChildren(); starts = {};
    showLegend(known ? known.split(",") : [], all);
    let got;
    // A server busy or restarting answers again a moment later: a few tries, not one.
    // All ranks: one page of every rank's lines in the order they were written.
    for (let tries = 1; ; tries++) {
      try { got = await api(all ? `${path}/merged?kib=256` : `${path}/page?rank=${rank}&kib=256`); break; }
      catch (e) {
        state.textContent = e.message;
        if (tries >= 5) return;
        await new Promise((done) => setTimeout(done, 1000));
      }
    }
    const at = [];
    if (all) {
      starts = got.starts;
      if (Object.values(starts).some((start) => start > 0)) log.append(el("div", {class: "more"}, MORE));
      log.append(...got.lines.map(([r, t, ts]) => line(r, t, true, ts)));
      for (const [r, end] of Object.entries(got.ends)) at.push(`${r}:${end}`);
    } else {
      for (const page of got.pages) {
        starts[page.rank] = page.start;
        if (page.start > 0) log.append(el("div", {class: "more"}, MORE));
        log.append(...page.lines.map((t, i) => line(page.rank, t, false, page.times[i])));
        at.push(`${page.rank}:${page.end}`);
      }
    }
    log.scrollTop = log.scrollHeight;
    source = new EventSource(`/api/v1${path}/events?rank=${rank}&at=${at.join(",")}`);
    state.textContent = pane.ended ? "" : "live";
    source.onmessage = (event) => {
      const data = JSON.parse(event.data);
      const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 30;
      for (const [r, t, cont, ts] of data.lines) {
        // The rest of a line shown before (a long line, or one that waited for its end).
        const last = log.lastElementChild;
        if (cont && last && last.dataset.rank === String(r)) last.append(clean(t));
        else log.append(line(r, t, all, ts));
      }
      while (log.childElementCount > LOG_CAP) { log.firstElementChild.remove(); starts = {}; }
      if (stick) log.scrollTop = log.scrollHeight;
    };
    source.addEventListener("end", () => { source.close(); state.textContent = "the job has ended"; });
    source.onerror = () => { state.textContent = "reconnecting…"; };
  }
  // Older lines, from where each shown rank's lines begin (its byte offset). With all
  // ranks, the server merges the ranks' older lines by time, holding back those that a
  // rank's next page may have to go before.
  async function earlier() {
    const ranks = Object.keys(starts).filter((r) => starts[r] > 0);
    if (loading || !ranks.length) return;
    loading = true;
    const all = picker.value === "all";
    try {
      let lines;
      if (all) {
        const got = await api(`${path}/merged?kib=256&before=${ranks.map((r) => `${r}:${starts[r]}`).join(",")}`);
        lines = got.lines.map(([r, t, ts]) => line(r, t, true, ts));
        Object.assign(starts, got.starts);
      } else {
        const page = (await api(`${path}/page?rank=${ranks[0]}&before=${starts[ranks[0]]}&kib=256`)).pages[0];
        lines = page.lines.map((t, i) => line(page.rank, t, false, page.times[i]));
        starts[page.rank] = page.start;
      }
      const height = log.scrollHeight;
      const marker = log.querySelector(".more");
      if (marker) marker.remove();
      log.prepend(...lines);
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
  let picked = false;  // the reader chose a rank: the page keeps to it
  picker.addEventListener("change", () => { picked = true; open(); });
  pane.ranks = (job) => {
    pane.ended = TERMINAL.has(job.status);
    const ranks = (job.logs && job.logs.user_logs || []).map((p) => p.match(/_(\d+)\.txt$/)[1]);
    if (!ranks.length) ranks.push("0");
    const key = ranks.join(",");
    // A failed job opens on the rank that failed first (its root cause), not on rank 0,
    // whose own error is often only that a peer died.
    const e = job.status === "Failed" ? job.error : null;
    const cause = e && e.rank !== null && e.rank !== undefined ? String(e.rank) : null;
    const wanted = !picked && cause !== null && ranks.includes(cause) ? cause : null;
    if (key === known && (wanted === null || picker.value === wanted)) return;
    const shown = picker.value;
    if (key !== known) {
      known = key;
      picker.replaceChildren(...ranks.map((r) => el("option", {value: r}, `rank ${r}`)),
        el("option", {value: "all"}, "all ranks interleaved"));
    }
    const chosen = wanted || shown || "0";
    picker.value = ranks.includes(chosen) || chosen === "all" ? chosen : "0";
    showLegend(ranks, picker.value === "all");
    if (!source || picker.value !== shown) open();
  };
  return pane;
}
