"use strict";
// ---------------------------------------------------------------- models, data, datastores
const COLLECTIONS = {
  models: {title: "Models", list: "/models", key: "models", versioned: true},
  data: {title: "Data assets", list: "/data", key: "assets", versioned: true},
  datastores: {title: "Datastores", list: "/datastores", key: "datastores",
    row: (d) => Object.assign({name: d.show.name, type: d.show.type, where: d.where}, d.show)},
};

function scalar(value) {
  return value === null || value === undefined ? "-" :
    typeof value === "object" ? JSON.stringify(value) : String(value);
}

function valueCell(key, value) {
  if (key === "job" && value) return el("a", {href: "/jobs/" + encodeURIComponent(value)}, value);
  if (value !== null && typeof value === "object") return el("pre", {}, JSON.stringify(value, null, 2));
  return scalar(value);
}

async function collectionView(kind) {
  const spec = COLLECTIONS[kind];
  const rest = location.pathname.split("/").slice(2).map(decodeURIComponent).join("/");
  if (rest) return itemView(kind, spec, rest);
  main.append(el("h1", {}, spec.title));
  let items;
  try { items = (await api(spec.list))[spec.key].map(spec.row || ((i) => i)); }
  catch (e) { main.append(el("div", {class: "error"}, e.message)); return; }
  if (!items.length) { main.append(el("div", {class: "muted"}, `no ${spec.title.toLowerCase()} yet`)); return; }
  const columns = Object.keys(items[0]).filter((k) =>
    items.some((i) => i[k] === null || typeof i[k] !== "object")).slice(0, 9);
  main.append(el("table", {id: "items"}, el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", {}, c)))),
    el("tbody", {}, ...items.map((item) => el("tr", {"data-name": item.name},
      ...columns.map((c) => el("td", {}, c === "name"
        ? el("a", {href: `/${kind}/${encodeURIComponent(item.name)}` + (spec.versioned ? `?version=${encodeURIComponent(item.version)}` : "")}, item.name)
        : valueCell(c, item[c]))))))));
}

async function itemView(kind, spec, name) {
  const version = new URLSearchParams(location.search).get("version");
  const path = `${spec.list}/${encodeURIComponent(name)}` + (version ? `?version=${encodeURIComponent(version)}` : "");
  main.append(el("h1", {}, el("a", {href: `/${kind}`}, spec.title), " / ", name));
  let item;
  try { item = await api(path); }
  catch (e) { main.append(el("div", {class: "error"}, e.message)); return; }
  const files = kind === "models" ? item.files : null;
  main.append(section("Details", grid(Object.entries(item).filter(([k]) => k !== "files")
    .map(([k, v]) => [k, valueCell(k, v)]))));
  if (files) {
    main.append(section("Files", el("table", {id: "files"},
      el("thead", {}, el("tr", {}, el("th", {}, "path"), el("th", {}, "bytes"), el("th", {}, "sha256"))),
      el("tbody", {}, ...files.map((f) => el("tr", {},
        el("td", {}, el("a", {href: `/api/v1/models/${encodeURIComponent(item.name)}/file?version=${encodeURIComponent(item.version)}&path=${encodeURIComponent(f.path)}`, download: f.path.split("/").pop()}, f.path)),
        el("td", {}, scalar(f.size)), el("td", {}, scalar(f.sha256))))))));
  }
  if (kind === "datastores") {
    try {
      const entries = (await api(`/datastores/${encodeURIComponent(name)}/ls`)).entries;
      main.append(section("Top folder", el("pre", {id: "ls"}, entries.map((e) => typeof e === "object" ? (e.name || e.path || JSON.stringify(e)) : String(e)).join("\n") || "(empty)")));
    } catch (e) { main.append(section("Top folder", el("pre", {id: "ls", class: "error"}, e.message))); }
  }
}
