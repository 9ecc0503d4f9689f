"use strict";
// ---------------------------------------------------------------- sign in
function signinView() {
  const token = el("input", {type: "password", id: "token", placeholder: "phx_…", autocomplete: "off"});
  const message = el("div", {class: "error"});
  async function go() {
    try { await api("/session", {method: "POST", json: {token: token.value}}); location.href = "/"; }
    catch (e) { message.textContent = e.message; }
  }
  token.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
  main.append(el("div", {class: "card signin"}, el("h2", {}, "Sign in"),
    el("div", {class: "muted"}, "Paste your API token (phalanx server token create --user NAME)."),
    token, el("button", {id: "signin", onclick: go}, "Sign in"), message));
}

async function who() {
  try {
    const me = await WHOAMI;
    if (!me) return;
    const box = document.getElementById("who");
    if (me.auth) {
      box.replaceChildren(`${me.user} (${me.role}) `, el("a", {href: "#", onclick: async (e) => {
        e.preventDefault(); await api("/session", {method: "DELETE"}); location.href = "/signin"; }}, "sign out"));
    } else box.textContent = "this machine (no auth)";
  } catch (e) { /* signed out: the sign-in page says so */ }
}

const VIEWS = {jobs: jobsView, job: jobView, compare: compareView, bench: benchView, signin: signinView,
  compute: computeView, queue: queueView};
for (const kind of Object.keys(COLLECTIONS)) VIEWS[kind] = () => collectionView(kind);
VIEWS[document.body.dataset.view]();
if (document.body.dataset.view !== "signin") who();
