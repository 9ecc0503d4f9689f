"use strict";
// ---------------------------------------------------------------- phalanx bench runs
// The runs `phalanx bench train` (and `bench data`) kept in the workspace: the
// chosen one's throughput per grid point as bars, the ideal and the scaling
// efficiency beside them, its points and the published anchors as tables.

function fixed(value, digits) {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : "-";
}

function safeUrl(url) { return /^https:\/\//.test(String(url || "")) ? String(url) : null; }

function table(id, columns, rows) {
  return el("table", {id}, el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", {}, c)))),
    el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c))))));
}

// Bars of `values` (one per label), with a second series of points on its own scale.
function barChart(box, labels, bars, extra) {
  const xs = labels.map((_, i) => i);
  const data = [xs, bars.values];
  // eslint-disable-next-line no-undef
  // Away from the bars the legend names what hovering shows, rather than "--".
  const away = (format) => (u, v, si, idx) => (idx === null || idx === undefined ? "" : format(v));
  const series = [{label: "point", value: (u, i) => (i === null ? "hover a bar" : labels[i] ?? "-")},
    // eslint-disable-next-line no-undef
    {label: bars.label, value: away((v) => fixed(v, 1)), fill: "#2457c5cc", stroke: "#2457c5", paths: uPlot.paths.bars({size: [0.6, 80]}), points: {show: false}}];
  const axes = [{values: (u, ticks) => ticks.map((t) => labels[t] ?? ""), splits: () => xs},
    {label: bars.label}];
  const scales = {x: {time: false, range: [-0.6, xs.length - 0.4]}, y: {range: (u, lo, hi) => [0, hi * 1.15 || 1]}};
  for (const more of extra) {
    data.push(more.values);
    series.push({label: more.label, value: away((v) => fixed(v, 2)), stroke: more.color, width: 0, scale: more.scale || "y",
      points: {show: true, size: 9, fill: more.color}});
    if (more.scale) {
      scales[more.scale] = {range: more.range};
      axes.push({scale: more.scale, side: 1, label: more.label, grid: {show: false}});
    }
  }
  // eslint-disable-next-line no-undef
  new uPlot({width: Math.max(400, box.clientWidth - 28), height: 340, series, axes, scales,
    legend: {show: true}}, data, box);
}

function trainRun(box, run) {
  const points = run.points || [];
  const chart = el("div", {class: "card", id: "bench-chart", "data-points": String(points.length)},
    el("h2", {}, run.title || run.run));
  box.append(chart);
  barChart(chart, points.map((p) => p.label), {label: "img/s total", values: points.map((p) => p.img_per_sec_total)}, [
    {label: "ideal (processes × 1×1)", color: "#9e9e9e", values: points.map((p) => p.ideal_img_per_sec)},
    {label: "scaling efficiency", color: "#c5247a", scale: "eff", range: [0, 1.2], values: points.map((p) => p.efficiency)},
  ]);
  box.append(section("Grid points", table("bench-points",
    ["nodes × processes", "processes", "img/s total", "img/s per process", "ideal img/s", "scaling efficiency", "job"],
    points.map((p) => [p.label + (p.in_grid === false ? " (baseline, added)" : ""), String(p.processes),
      fixed(p.img_per_sec_total, 1), fixed(p.img_per_sec_per_process, 1), fixed(p.ideal_img_per_sec, 1),
      fixed(p.efficiency, 2), p.job ? el("a", {href: "/jobs/" + encodeURIComponent(p.job)}, p.job) : "-"])),
  el("div", {class: "muted"}, `Scaling efficiency = img/s total / (processes × ${fixed(run.baseline_img_per_sec, 1)}), the img/s of this run's 1 × 1 point.`)));
  box.append(section("Published anchors: ResNet-50 v1.5 training, one GPU", table("bench-anchors",
    ["GPU", "precision", "batch per GPU", "img/s per GPU", "source"],
    (run.anchors || []).map((a) => {
      const src = a.source || {};
      const url = safeUrl(src.url);
      return [a.gpu, a.precision, String(a.batch_size), fixed(a.img_per_sec, 0),
        url ? el("a", {href: url, rel: "noreferrer", title: src.title || ""}, src.name || url) : (src.name || "-")];
    }))));
}

function dataRun(box, run) {
  const modes = Object.keys(run.median || {});
  const chart = el("div", {class: "card", id: "bench-chart", "data-points": String(modes.length)},
    el("h2", {}, "data loading: img/s, median of the rounds"));
  box.append(chart);
  barChart(chart, modes, {label: "img/s", values: modes.map((m) => run.median[m])}, []);
  box.append(section("Modes", table("bench-points", ["mode", "", "img/s median"],
    modes.map((m) => [m, (run.modes || {})[m] || "", fixed(run.median[m], 1)]))));
}

async function benchView() {
  main.append(el("h1", {}, "Benchmarks"));
  let runs;
  try { runs = (await api("/bench")).runs; }
  catch (e) { main.append(el("div", {class: "error"}, e.message)); return; }
  if (!runs.length) {
    main.append(el("div", {class: "muted"}, "no benchmark run kept yet: `phalanx bench train` keeps each run here"));
    return;
  }
  const picker = el("select", {id: "bench-run"}, ...runs.map((r) =>
    el("option", {value: r.run}, `${when(r.created_at)}  ${r.kind}  ${r.title || ""}`)));
  const box = el("div", {id: "bench"});
  main.append(el("div", {class: "filters"}, picker), box);
  const wanted = new URLSearchParams(location.search).get("run");
  picker.value = runs.some((r) => r.run === wanted) ? wanted : runs[0].run;
  async function show() {
    history.replaceState(null, "", "?run=" + encodeURIComponent(picker.value));
    box.replaceChildren();
    let run;
    try { run = await api("/bench/" + encodeURIComponent(picker.value)); }
    catch (e) { box.append(el("div", {class: "error"}, e.message)); return; }
    if (run.kind === "data") dataRun(box, run); else trainRun(box, run);
    const host = run.machine || {};
    box.append(section("How it was measured", grid([
      ["run", run.run], ["when", ago(run.created_at)], ["command", el("pre", {id: "bench-command"}, run.command || "-")],
      ["machine", `${host.arch || "?"}, ${host.cores || "?"} cores (${host.cpu || "?"}), python ${host.python || "?"}, torch ${host.torch || "?"}`],
      ["set-up", fieldTable(run.config || run.args || {})],
    ])));
  }
  picker.addEventListener("change", show);
  show();
}
