"""What the dashboard's pages carry inline: the style, the tooltip script and the summary's finder and
sorter. Inline, so a page needs no network and no other file; apart from pages.py, so the pages' code
reads without scrolling past them."""

STYLE = """
:root { --ink: #1d2330; --muted: #5b6475; --line: #d8dde6; --bad: #d62728; --warn: #e08a00; --ok: #2b8a3e; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       background: #f5f7fa; }
header.top { background: #fff; border-bottom: 1px solid var(--line); padding: 14px 24px 10px; }
header.top h1 { margin: 0; font-size: 20px; }
.sub { color: var(--muted); margin: 2px 0 8px; font-size: 12.5px; }
nav a { margin-right: 16px; color: var(--muted); text-decoration: none; font-weight: 600; }
nav a[aria-current] { color: var(--ink); border-bottom: 2px solid var(--ink); }
main { padding: 16px 24px 40px; }
h2 { font-size: 16px; margin: 22px 0 8px; }
a { color: #1f5fbf; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid var(--line); border-left: 5px solid var(--muted); border-radius: 6px;
        padding: 10px 14px; }
.card h2 { margin: 0 0 2px; font-size: 15px; }
.card.bad { border-left-color: var(--bad); } .card.warn { border-left-color: var(--warn); }
.card.blind { border-left-color: #6a51a3; }
.card ul { margin: 6px 0 0; padding-left: 18px; } .card li { margin: 3px 0; }
.card .none { color: var(--muted); }
.count { display: inline-block; min-width: 22px; padding: 0 6px; border-radius: 10px; background: #eef1f5;
         text-align: center; font-size: 12px; margin-left: 4px; }
.hint { color: var(--muted); font-size: 12px; margin: 0; }
table { border-collapse: collapse; background: #fff; border: 1px solid var(--line); font-size: 12.5px; }
th, td { padding: 4px 9px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 11.5px; font-weight: 600;
         background: #eef1f5; color: var(--muted); }
.badge.refused { background: #fde2e2; color: #a51d1e; } .badge.suspect { background: #fff0d6; color: #8a5300; }
.badge.accepted { background: #e3f4e6; color: #1f6b2e; } .badge.sim { background: #e8e2f6; color: #4b3a86; }
.layer-note { color: var(--muted); font-size: 12.5px; margin: -4px 0 10px; }
.panels { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 14px; }
.panel { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px 8px; }
.panel.status-refused { border-top: 4px solid var(--bad); } .panel.status-suspect { border-top: 4px solid var(--warn); }
.panel h3 { display: inline; font-size: 15px; margin: 0 6px 0 0; }
.facts { color: var(--muted); font-size: 12px; margin: 3px 0 4px; }
.small { display: grid; grid-template-columns: repeat(3, 1fr); gap: 6px; }
.chart { width: 100%; height: auto; display: block; }
.chart-title { font-size: 11.5px; color: var(--muted); margin: 4px 0 0 4px; }
.notes { margin: 6px 0 0; padding-left: 18px; font-size: 12.5px; } .notes li { margin: 2px 0; }
.notes .in-force { font-weight: 600; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; font-size: 12.5px; color: var(--muted); margin: 0 0 8px; }
.legend svg { vertical-align: middle; }
.toc { font-size: 12.5px; columns: 3 220px; margin: 0 0 10px; padding-left: 18px; }
svg text { font: 10px system-ui, sans-serif; fill: var(--muted); }
svg .segment-band { fill: #f7f8fb; } svg .segment-band.odd { fill: #eef0f6; }
svg .segment-start { stroke: #8a93a6; stroke-dasharray: 4 3; }
svg .grid { stroke: #e7eaf0; } svg .level { stroke-dasharray: 6 3; stroke-width: 1.4; }
svg .change line { stroke-width: 2; } svg .change.drift line { stroke-dasharray: 7 4; }
svg .change-label { fill: #6d2a87; font-weight: 600; } svg .newest-label { fill: var(--ink); font-weight: 600; }
svg .interval { fill: none; stroke-width: 1.3; } svg .ring { fill: none; stroke: var(--ink); stroke-width: 1.6; }
svg .hit { fill: transparent; } svg .point:focus, svg .change:focus { outline: none; }
svg .point:hover .marker, svg .point:focus .marker { stroke: var(--ink); stroke-width: 2.5; }
.tip { position: fixed; z-index: 10; max-width: 460px; background: #1d2330; color: #fff; font-size: 12px;
       padding: 7px 9px; border-radius: 5px; white-space: pre-line; pointer-events: none;
       box-shadow: 0 3px 10px rgba(0, 0, 0, .25); }
footer { color: var(--muted); font-size: 12px; padding: 0 24px 24px; }
.finder { margin: 18px 0 0; display: flex; gap: 10px; align-items: center; }
.finder input { font: inherit; padding: 4px 8px; width: 320px; border: 1px solid var(--line); border-radius: 4px; }
.finder output { color: var(--muted); font-size: 12.5px; }
th button { font: inherit; font-weight: 600; background: none; border: 0; padding: 0; cursor: pointer;
            color: var(--ink); }
th[aria-sort] button::after { content: " \\25B2"; font-size: 9px; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
.verdict { font-weight: 600; font-size: 11.5px; } .verdict.REGRESSION { color: #a51d1e; }
.verdict.SUSPECT { color: #8a5300; } .verdict.IMPROVED, .verdict.PASS { color: #1f6b2e; }
svg.trend { display: block; }
.key-index h3 { font-size: 14px; margin: 14px 0 4px; } .key-index ul { columns: 3 260px; margin: 0; }
"""

#: Hover (and keyboard focus) shows a point's or a change's `<title>` in a styled box.
SCRIPT = """
(function () {
  "use strict";
  var tip = document.createElement("div");
  tip.className = "tip";
  tip.hidden = true;
  document.body.appendChild(tip);
  document.querySelectorAll(".point, .change").forEach(function (element) {
    var title = element.querySelector(":scope > title");
    if (title) { element.setAttribute("data-tip", title.textContent); title.remove(); }
  });
  function show(element, x, y) {
    tip.textContent = element.getAttribute("data-tip");
    tip.hidden = false;
    var left = Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8);
    var top = y + 14 + tip.offsetHeight > window.innerHeight ? y - tip.offsetHeight - 10 : y + 14;
    tip.style.left = Math.max(4, left) + "px";
    tip.style.top = Math.max(4, top) + "px";
  }
  function hide() { tip.hidden = true; }
  document.addEventListener("mouseover", function (event) {
    var element = event.target.closest && event.target.closest("[data-tip]");
    if (element) { show(element, event.clientX, event.clientY); } else { hide(); }
  });
  document.addEventListener("focusin", function (event) {
    var element = event.target.closest && event.target.closest("[data-tip]");
    if (!element) { hide(); return; }
    var box = element.getBoundingClientRect();
    show(element, box.right, box.bottom);
  });
  document.addEventListener("keydown", function (event) { if (event.key === "Escape") { hide(); } });
})();
"""


#: The summary's key tables: the finder keeps the rows whose key contains what is typed (every table),
#: a column's header button sorts its table by the cells' `data-v` (numbers as numbers, blanks last).
TABLE_SCRIPT = """
(function () {
  "use strict";
  var rows = Array.from(document.querySelectorAll("table.keys tbody tr"));
  var find = document.getElementById("find");
  var shown = document.getElementById("shown");
  function filter() {
    var text = find.value.trim().toLowerCase();
    var count = 0;
    rows.forEach(function (row) {
      row.hidden = text !== "" && row.dataset.key.indexOf(text) < 0;
      if (!row.hidden) { count += 1; }
    });
    shown.textContent = text ? count + " of " + rows.length + " keys" : rows.length + " keys";
  }
  if (find) { find.addEventListener("input", filter); filter(); }
  function value(row, column, numeric) {
    var v = row.cells[column].dataset.v;
    if (v === undefined || v === "") { return null; }
    return numeric ? Number(v) : v;
  }
  document.querySelectorAll("table.keys th[data-sort]").forEach(function (th) {
    th.querySelector("button").addEventListener("click", function () {
      var table = th.closest("table");
      var column = Array.prototype.indexOf.call(th.parentNode.children, th);
      var numeric = th.dataset.sort === "number";
      var up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th[aria-sort]").forEach(function (other) { other.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var body = table.tBodies[0];
      var sorted = Array.from(body.rows).sort(function (a, b) {
        var x = value(a, column, numeric), y = value(b, column, numeric);
        if (x === null || y === null) { return (x === null) - (y === null); }
        var order = x < y ? -1 : x > y ? 1 : 0;
        return up ? order : -order;
      });
      var fragment = document.createDocumentFragment();
      sorted.forEach(function (row) { fragment.appendChild(row); });
      body.appendChild(fragment);
    });
  });
})();
"""
