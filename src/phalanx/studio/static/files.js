"use strict";
// ---------------------------------------------------------------- files and spec
// A folder's files as a tree: folders collapsed, each with its size and file count,
// opened on a click; a folder's entries are made only when it is first opened, and
// at most TREE_PAGE at a time ("N more"), so thousands of files cost nothing until asked.
const TREE_PAGE = 200;

function buildTree(files, top) {
  const root = {name: top, path: top, dirs: new Map(), files: [], size: 0, count: 0};
  for (const f of files) {
    const parts = f.path.split("/").slice(top.split("/").length);
    let node = root;
    node.size += f.size; node.count += 1;
    for (const part of parts.slice(0, -1)) {
      if (!node.dirs.has(part)) {
        node.dirs.set(part, {name: part, path: node.path + "/" + part, dirs: new Map(), files: [], size: 0, count: 0});
      }
      node = node.dirs.get(part);
      node.size += f.size; node.count += 1;
    }
    node.files.push(Object.assign({name: parts[parts.length - 1]}, f));
  }
  return root;
}

function treeEntries(box, node, href) {
  const entries = [...[...node.dirs.values()].map((d) => ({dir: d})), ...node.files.map((f) => ({file: f}))];
  let shown = 0;
  const more = el("button", {class: "more-files"});
  function page() {
    const next = entries.slice(shown, shown + TREE_PAGE).map((e) => e.dir ? treeFolder(e.dir, href) :
      el("div", {class: "file", "data-path": e.file.path},
        el("a", {href: href.file(e.file.path), download: e.file.name}, e.file.name),
        el("span", {class: "size"}, size(e.file.size))));
    shown += next.length;
    more.before(...next);
    more.textContent = `${entries.length - shown} more`;
    more.hidden = shown >= entries.length;
  }
  more.addEventListener("click", page);
  box.append(more);
  page();
}

function treeFolder(node, href) {
  const children = el("div", {class: "children"});
  const folder = el("details", {class: "dir", "data-path": node.path},
    el("summary", {}, node.name + "/", el("span", {class: "size"},
      `${size(node.size)}, ${node.count} file${node.count === 1 ? "" : "s"}`),
    el("a", {class: "tar", href: href.tar(node.path), download: node.name + ".tar"}, "tar")), children);
  folder.addEventListener("toggle", () => {
    if (folder.open && !children.childElementCount) treeEntries(children, node, href);
  });
  return folder;
}

function filesPane(name) {
  const pane = el("div", {id: "files-pane"});
  const job = encodeURIComponent(name);
  const at = (path) => `/api/v1/jobs/${job}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
  const href = {file: (path) => at(path) + "?raw=true", tar: at};
  pane.load = async () => {
    const parts = [];
    for (const folder of ["outputs", "checkpoints"]) {
      let listed;
      try { listed = await api(`/jobs/${job}/tree?path=${folder}`); }
      catch (e) { parts.push(section(folder, el("div", {class: "muted"}, e.message))); continue; }
      const root = buildTree(listed.files, folder);
      const box = el("div", {class: "tree", "data-folder": folder});
      if (root.count) treeEntries(box, root, href);
      parts.push(section(`${folder}: ${size(root.size)}, ${root.count} file${root.count === 1 ? "" : "s"}` +
        (listed.complete ? "" : " (the first files only)"), root.count ? box : el("div", {class: "muted"}, "no files"),
      el("div", {}, el("a", {href: `/api/v1/jobs/${job}/files/${folder}`, download: `${name}-${folder}.tar`}, `download all of ${folder} (tar)`))));
    }
    pane.replaceChildren(...parts);
  };
  return pane;
}

// The resolved spec names its code and inputs by where the server keeps them; those
// paths mean nothing to the reader (serverPath), so each is named instead.
function withoutServerPaths(value, key) {
  if (Array.isArray(value)) return value.map((v) => withoutServerPaths(v, key));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withoutServerPaths(v, k)]));
  }
  return (key === "code" || key === "path") && serverPath(value) ? "a folder on the server" : value;
}

function specPane(name) {
  const pane = el("div", {id: "spec"});
  pane.load = async () => {
    try {
      const spec = await api(`/jobs/${encodeURIComponent(name)}/spec`);
      // The text holds the values of its environment variables: the server sends it to
      // the job's owner and admins only.
      const submitted = spec.submitted === null ? "shown to the job's owner and admins only" : spec.submitted || "-";
      pane.replaceChildren(section("Spec as submitted", el("pre", {id: "spec-submitted"}, submitted)),
        section("Spec as resolved", el("pre", {id: "spec-resolved"}, yamlText(withoutServerPaths(spec.resolved)))));
    } catch (e) { pane.replaceChildren(el("div", {class: "error"}, e.message)); }
  };
  return pane;
}
