"""The viewer's inline stylesheet and script (no network, no external files)."""

CSS = r"""
*{box-sizing:border-box}body{margin:0;font:14px/1.4 system-ui,sans-serif;color:#1d2330;background:#f6f7f9}
header{padding:8px 14px;background:#24324a;color:#fff;display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:16px;margin:0}header .sub{opacity:.8;font-size:12px}
main{display:grid;grid-template-columns:minmax(260px,34%) 1fr;height:calc(100vh - 40px)}
#left{border-right:1px solid #d5d9e0;overflow:auto;padding:8px;background:#fff}
#right{overflow:auto;padding:12px 18px}
#filter{width:100%;padding:5px 7px;margin-bottom:6px;border:1px solid #c5cad3;border-radius:4px}
ul.tree{list-style:none;margin:0;padding-left:14px}ul.tree.root{padding-left:0}
.item{cursor:pointer;padding:1px 4px;border-radius:3px;white-space:nowrap;display:inline-block}
.item:hover{background:#e8eefb}.item.sel{background:#cddcff}
.tw{display:inline-block;width:14px;color:#778}
.badge{font-size:10px;padding:0 4px;border-radius:3px;margin-left:5px;vertical-align:1px}
.k-raw .badge{background:#e6e6e6;color:#555}.k-synthetic .badge{background:#d9f2e3;color:#146c3a}
.k-directory .badge{background:#fff1cc;color:#7a5b00}
.k-synthetic>.name{color:#146c3a;font-weight:600}.k-directory>.name{color:#7a5b00}
.s-added{background:#e3f7e8}.s-removed{background:#fde4e4;text-decoration:line-through}.s-edited{background:#fff4d6}
.s-moved{background:#e9e4fb}.s-relinked{background:#e1f1fb}
pre.text{white-space:pre-wrap;background:#fff;border:1px solid #d5d9e0;padding:10px;border-radius:4px;max-height:50vh;overflow:auto}
table.stats{border-collapse:collapse;background:#fff}table.stats td{border:1px solid #d5d9e0;padding:3px 8px}
a.ref{color:#2456c7;cursor:pointer;text-decoration:underline}section{margin-bottom:16px}h2{font-size:15px;margin:10px 0 6px}
.muted{color:#778}.chain{margin:2px 0}.pill{display:inline-block;padding:1px 6px;border-radius:9px;background:#eef;margin-right:6px}
"""

JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var byId = {}, kids = {}, refs = {};
  D.nodes.forEach(function (n) {
    byId[n.id] = n;
    (kids[n.parent] = kids[n.parent] || []).push(n);
    n.links.concat(n.provenance).forEach(function (t) { (refs[t] = refs[t] || []).push(n.id); });
  });
  Object.keys(kids).forEach(function (k) { kids[k].sort(function (a, b) { return a.path < b.path ? -1 : 1; }); });
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function label(n) {
    var span = el("span", {"class": "item k-" + n.kind + (n.status ? " s-" + n.status : ""), "data-id": n.id,
                           "data-kind": n.kind, "title": n.path});
    span.appendChild(el("span", {"class": "name"}, n.path.split("/").pop()));
    span.appendChild(el("span", {"class": "badge"}, n.kind + (n.status ? " · " + n.status : "")));
    span.addEventListener("click", function (ev) { ev.stopPropagation(); show(n.id); });
    return span;
  }
  function branch(parent, ul) {
    (kids[parent] || []).forEach(function (n) {
      var li = el("li"), has = (kids[n.path] || []).length > 0;
      var tw = el("span", {"class": "tw"}, has ? "▸" : "");
      li.appendChild(tw);
      li.appendChild(label(n));
      if (has) {
        var sub = null;
        tw.style.cursor = "pointer";
        tw.addEventListener("click", function () {
          if (sub) { sub.hidden = !sub.hidden; } else { sub = el("ul", {"class": "tree"}); branch(n.path, sub); li.appendChild(sub); }
          tw.textContent = sub.hidden ? "▸" : "▾";
        });
      }
      ul.appendChild(li);
    });
  }
  function expandTo(path) {
    var parts = path.split("/"), prefix = "";
    for (var i = 0; i < parts.length - 1; i++) {
      prefix = prefix ? prefix + "/" + parts[i] : parts[i];
      var node = D.nodes.find(function (n) { return n.path === prefix && n.status !== "removed"; });
      if (!node) continue;
      var item = document.querySelector('#tree .item[data-id="' + CSS.escape(node.id) + '"]');
      if (!item) continue;
      var li = item.parentNode, sub = li.querySelector("ul");
      if (!sub || sub.hidden) li.querySelector(".tw").click();
    }
  }
  function refList(title, ids, cls) {
    var sec = el("section", {"id": cls});
    sec.appendChild(el("h2", {}, title + " (" + ids.length + ")"));
    if (!ids.length) { sec.appendChild(el("div", {"class": "muted"}, "none")); return sec; }
    var ul = el("ul");
    ids.slice(0, 500).forEach(function (id) {
      var li = el("li"), n = byId[id];
      var a = el("a", {"class": "ref", "data-id": id}, n ? n.path : id);
      a.addEventListener("click", function () { show(id); });
      li.appendChild(a);
      if (n) li.appendChild(el("span", {"class": "badge"}, n.kind));
      ul.appendChild(li);
    });
    if (ids.length > 500) ul.appendChild(el("li", {"class": "muted"}, "… " + (ids.length - 500) + " more"));
    sec.appendChild(ul);
    return sec;
  }
  function show(id) {
    var n = byId[id];
    if (!n) return;
    document.querySelectorAll("#tree .item.sel").forEach(function (e) { e.classList.remove("sel"); });
    expandTo(n.path);
    var item = document.querySelector('#tree .item[data-id="' + CSS.escape(id) + '"]');
    if (item) { item.classList.add("sel"); item.scrollIntoView({block: "nearest"}); }
    var box = document.getElementById("detail");
    box.innerHTML = "";
    box.setAttribute("data-id", id);
    box.appendChild(el("h2", {"id": "node-path"}, n.path));
    var meta = el("div", {"class": "muted"});
    meta.appendChild(el("span", {"class": "pill", "id": "node-kind"}, n.kind));
    meta.appendChild(el("span", {"class": "pill"}, "id " + n.id));
    if (n.status) meta.appendChild(el("span", {"class": "pill s-" + n.status}, n.status));
    box.appendChild(meta);
    if (n.change) box.appendChild(el("div", {"class": "muted", "id": "node-change"}, n.change));
    box.appendChild(el("pre", {"class": "text", "id": "node-text"}, n.text || "(empty)"));
    if (n.truncated) box.appendChild(el("div", {"class": "muted"}, "text cut at " + n.text.length + " characters"));
    box.appendChild(refList("Links", n.links, "links"));
    box.appendChild(refList("Provenance", n.provenance, "provenance"));
    var chains = el("section", {"id": "provenance-paths"});
    chains.appendChild(el("h2", {}, "Provenance paths to raw documents"));
    if (n.kind === "raw") chains.appendChild(el("div", {"class": "muted"}, "a raw document: the faithful source"));
    else if (!(n.chains || []).length) chains.appendChild(el("div", {"class": "muted"}, "none"));
    (n.chains || []).forEach(function (c) { chains.appendChild(el("div", {"class": "chain"}, c.join("  →  "))); });
    box.appendChild(chains);
    box.appendChild(refList("Referenced by", refs[id] || [], "referrers"));
    if (location.hash !== "#" + encodeURIComponent(id)) history.replaceState(null, "", "#" + encodeURIComponent(id));
  }
  function stats() {
    var t = el("table", {"class": "stats", "id": "stats"});
    D.stats_rows.forEach(function (r) {
      var tr = el("tr"); tr.appendChild(el("td", {}, r[0])); tr.appendChild(el("td", {}, r[1])); t.appendChild(tr);
    });
    return t;
  }
  function diffPanel() {
    var sec = el("section", {"id": "diff"});
    sec.appendChild(el("h2", {}, "Changes from " + D.diff.a + " to " + D.diff.b));
    sec.appendChild(el("div", {}, D.diff.summary));
    ["added", "removed", "edited", "moved", "relinked"].forEach(function (k) {
      var ids = D.nodes.filter(function (n) { return n.status === k; }).map(function (n) { return n.id; });
      if (ids.length) sec.appendChild(refList(k, ids, "diff-" + k));
    });
    return sec;
  }
  document.getElementById("title").textContent = D.title;
  document.getElementById("subtitle").textContent = D.subtitle;
  branch("", document.getElementById("tree"));
  var home = document.getElementById("home");
  if (D.diff) home.appendChild(diffPanel());
  home.appendChild(el("h2", {}, "Structure"));
  home.appendChild(stats());
  document.getElementById("filter").addEventListener("input", function (ev) {
    var q = ev.target.value.toLowerCase(), res = document.getElementById("matches");
    res.innerHTML = "";
    if (q.length < 2) return;
    D.nodes.filter(function (n) { return n.path.toLowerCase().indexOf(q) >= 0; }).slice(0, 50).forEach(function (n) {
      var li = el("li"); li.appendChild(label(n)); res.appendChild(li);
    });
  });
  if (location.hash.length > 1) show(decodeURIComponent(location.hash.slice(1)));
  window.librarianViewer = {show: show, data: D};
})();
"""
