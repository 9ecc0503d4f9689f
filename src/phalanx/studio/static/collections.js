"use strict";
// ---------------------------------------------------------------- models, data, environments, datastores
// Each collection a table of chosen columns, each value humane (core.js): sizes, times
// relative, tags and metrics as chips, the job that made a model and the place data
// lies as links. A path on the server's disk is never shown (serverPath).
const COLLECTIONS = {
  models: {title: "Models", list: "/models", key: "models", versioned: true,
    columns: [["version"], ["size", "size"], ["job", "made by job"], ["tags"], ["metrics"], ["created_at", "created"],
      ["description"]]},
  data: {title: "Data assets", list: "/data", key: "assets", versioned: true,
    columns: [["version"], ["type"], ["path", "where"], ["tags"], ["created_at", "created"], ["description"]]},
  environments: {title: "Environments", list: "/environments", key: "environments", versioned: true,
    columns: [["version"], ["image"], ["build", "built from"], ["tags"], ["created_at", "created"], ["description"]]},
  datastores: {title: "Datastores", list: "/datastores", key: "datastores",
    row: (d) => Object.assign({}, d.show, {name: d.show.name, type: d.show.type, where: d.where}),
    columns: [["type"], ["where"], ["description"], ["owner"]]},
};

// A data path: a datastore's path links to that folder's listing; a job's output to the
// job's files; the server's own disk is named, not shown.
function place(value) {
  if (typeof value !== "string" || !value) return humane("", value);
  const store = /^azureml:\/\/datastores\/([^/]+)\/paths\/(.*)$/.exec(value);
  if (store) {
    return el("a", {href: `/datastores/${encodeURIComponent(store[1])}?path=${encodeURIComponent(store[2])}`}, value);
  }
  const output = /^azureml:\/\/jobs\/([^/]+)\/outputs\/([^/]+)/.exec(value);
  if (output) return el("a", {href: `/jobs/${encodeURIComponent(output[1])}#files`}, value);
  const asset = /^azureml:([^:/]+):([^:/]+)$/.exec(value);
  if (asset) return el("a", {href: `/data/${encodeURIComponent(asset[1])}?version=${encodeURIComponent(asset[2])}`}, value);
  if (serverPath(value)) return el("span", {class: "muted"}, "a folder on the server's disk");
  return value;
}

function valueCell(kind, key, value) {
  // Where a model was copied from: a folder of the machine that registered it.
  if (key === "source" && serverPath(value)) return el("span", {class: "muted"}, "a local folder, copied into the registry");
  if (serverPath(value)) return el("span", {class: "muted"}, "a folder on the server's disk");
  if (key === "job" && value) return el("a", {href: "/jobs/" + encodeURIComponent(value)}, value);
  if (key === "path" || key === "where" || key === "source") return place(value);
  if (key === "size" && typeof value === "number") return size(value);
  if (key === "build" && value && typeof value === "object") return value.path && !serverPath(value.path) ? value.path : "a build context";
  return humane(key, value);
}

function itemHref(kind, spec, item) {
  return `/${kind}/${encodeURIComponent(item.name)}` + (spec.versioned ? `?version=${encodeURIComponent(item.version)}` : "");
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
  // A column no item has a value in is left out (an environment without a build).
  const columns = spec.columns.filter(([key]) => items.some((i) => i[key] !== undefined && i[key] !== null));
  main.append(scrolling(el("table", {id: "items"},
    el("thead", {}, el("tr", {}, el("th", {}, "Name"), ...columns.map(([key, label]) => el("th", {"data-col": key}, label || words(key))))),
    el("tbody", {}, ...items.map((item) => el("tr", {"data-name": item.name},
      el("td", {}, el("a", {href: itemHref(kind, spec, item)}, item.name)),
      ...columns.map(([key]) => el("td", {"data-col": key, class: key === "description" || key === "tags" || key === "metrics" ? "wrap" : null},
        valueCell(kind, key, item[key])))))))));
}

// The fields a detail page leaves out: shown elsewhere on it, or a server's path.
const HIDDEN = new Set(["files", "folder", "name"]);

async function itemView(kind, spec, name) {
  const params = new URLSearchParams(location.search);
  const version = params.get("version");
  const path = `${spec.list}/${encodeURIComponent(name)}` + (version ? `?version=${encodeURIComponent(version)}` : "");
  main.append(el("h1", {}, el("a", {href: `/${kind}`}, spec.title), " / ", name));
  let item;
  try { item = await api(path); }
  catch (e) { main.append(el("div", {class: "error"}, e.message)); return; }
  main.append(section("Details", grid(Object.entries(item).filter(([k]) => !HIDDEN.has(k))
    .map(([k, v]) => [words(k), valueCell(kind, k, v)]))));
  if (kind === "models" && item.files) {
    main.append(section(`Files: ${size(item.size)}, ${item.files.length} file${item.files.length === 1 ? "" : "s"}`,
      scrolling(el("table", {id: "files"},
        el("thead", {}, el("tr", {}, el("th", {}, "File"), el("th", {}, "Size"), el("th", {}, "SHA-256"))),
        el("tbody", {}, ...item.files.map((f) => el("tr", {},
          el("td", {}, el("a", {href: `/api/v1/models/${encodeURIComponent(item.name)}/file?version=${encodeURIComponent(item.version)}&path=${encodeURIComponent(f.path)}`, download: f.path.split("/").pop()}, f.path)),
          el("td", {"data-col": "size"}, size(f.size)),
          el("td", {title: f.sha256 || ""}, f.sha256 ? f.sha256.slice(0, 12) + "…" : "-"))))))));
  }
  if (kind === "datastores") await folderListing(name, params.get("path") || "");
}

// One folder of a datastore: its folders as links one level down, its files with sizes.
async function folderListing(store, folder) {
  const href = (p) => `/datastores/${encodeURIComponent(store)}` + (p ? `?path=${encodeURIComponent(p)}` : "");
  const title = folder ? `Folder ${folder}` : "Top folder";
  const up = folder ? el("div", {}, el("a", {href: href(folder.split("/").slice(0, -1).join("/"))}, "⬑ up")) : null;
  let entries;
  try { entries = (await api(`/datastores/${encodeURIComponent(store)}/ls?path=${encodeURIComponent(folder)}`)).entries; }
  catch (e) { main.append(section(title, up, el("div", {id: "ls", class: "error"}, e.message))); return; }
  const rows = entries.map((e) => el("tr", {},
    el("td", {}, e.type === "folder" ? el("a", {href: href(folder ? `${folder}/${e.name}` : e.name)}, e.name + "/") : e.name),
    el("td", {}, e.type === "folder" ? "folder" : size(e.size))));
  main.append(section(title, up, rows.length ? scrolling(el("table", {id: "ls"},
    el("thead", {}, el("tr", {}, el("th", {}, "Name"), el("th", {}, "Size"))), el("tbody", {}, ...rows)))
    : el("div", {id: "ls", class: "muted"}, "(empty)")));
}
